"""Benchmark: training throughput on the JAX backend, for machines without TensorFlow.

GPU machines often have JAX but not TensorFlow (the one lent to this project does), so
this benchmark needs neither TensorFlow nor the records reader there. It builds the
model, schedule and optimizer the way `partf-train` does (`ModelConfig`,
`PARTransformerXL`, `build_schedule`, `build_optimizer`, `compile(jit_compile=True,
steps_per_execution=N)`) and trains with `fit` on context batches held in numpy,
in stream order, memory carried across batches.

Two steps:

1. Where TensorFlow is installed, export records to numpy (int32 [N, B, T] inputs and
   targets), by default the original project's WikiText-2 validation records from the
   shared data folder (benchmarks/shared_data.py):

       python benchmarks/jax_throughput.py --export data/bench_batches.npz

2. Anywhere with JAX (a GPU machine), time training:

       KERAS_BACKEND=jax python benchmarks/jax_throughput.py \\
           --batches data/bench_batches.npz --json throughput.json

For each configuration (base: base_model.sh's model; tiny: d_model 16, 2 blocks),
precision and steps_per_execution it reports steady-state steps/s (median of
--repeats timed `fit` calls of --steps steps each, after a warm-up call that
compiles), tokens/s, the analytic FLOP/s achieved, and for float32 at the largest
steps_per_execution the batches/s of a full evaluation pass (`JaxEvaluator`). With
--full_run_steps it then trains a fresh base model for that many steps in one `fit`
call (the data cycled) and reports the wall time, compilation included: 56,080 steps is
base_model.sh's 20 epochs of WikiText-2.

JAX's persistent compilation cache is off unless --compilation_cache names a folder.
With it on, a program compiled earlier (by this run's timed base model at the same
steps per execution, or by an earlier run) is read back instead of compiled, so the
full run's wall time would no longer include compilation; the report says which.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_data import original_dir  # noqa: E402
from train_throughput import COMMON, SHAPES, flops_per_step, typical_block_rows  # noqa: E402

# base_model.sh: 20 epochs of the WikiText-2 training records (2,804 batches of 32x32).
FULL_RUN_STEPS = 56_080


def export(path: Path, records: str) -> None:
    """Writes the records' batches to `path` (needs TensorFlow)."""
    from partf.data.tfrecords import load_tfrecords

    inputs, targets = [], []
    for x, y in load_tfrecords(records):
        inputs.append(x.numpy())
        targets.append(y.numpy())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial.npz")
    np.savez(partial, inputs=np.stack(inputs), targets=np.stack(targets))
    partial.replace(path)
    print(f"wrote {len(inputs)} batches of {inputs[0].shape} to {path}")


def load_batches(path: str | None, vocab_size: int) -> tuple[np.ndarray, np.ndarray, str]:
    """int32 [N, B, T] inputs and targets: from `path`, else Zipf-distributed tokens."""
    if path:
        data = np.load(path)
        return data["inputs"].astype(np.int32), data["targets"].astype(np.int32), path
    rng = np.random.default_rng(0)
    stream = np.minimum(rng.zipf(1.1, size=304 * 32 * 32 + 1), vocab_size - 1).astype(np.int32)
    rows = stream[:-1].reshape(32, -1)
    nexts = stream[1:].reshape(32, -1)
    inputs = rows[:, : 304 * 32].reshape(32, 304, 32).transpose(1, 0, 2)
    targets = nexts[:, : 304 * 32].reshape(32, 304, 32).transpose(1, 0, 2)
    return np.ascontiguousarray(inputs), np.ascontiguousarray(targets), "zipf(1.1) tokens"


def cycled(batches: np.ndarray, steps: int) -> np.ndarray:
    """`steps` batches of the stream, starting over at its end, flattened to rows."""
    index = np.arange(steps) % len(batches)
    return batches[index].reshape(-1, batches.shape[-1])


def build(config: str, vocab_size: int, batch: int, total_steps: int, spe: int) -> Any:
    """Model, schedule and optimizer as `partf-train` builds them, compiled."""
    from partf.models.config import ModelConfig
    from partf.models.par_transformer_xl import PARTransformerXL
    from partf.training.config import TrainConfig

    model_config = ModelConfig(
        vocab_size=vocab_size,
        batch_size=batch,
        tau_steps=total_steps,
        **SHAPES[config],
        **COMMON,
    )
    model = PARTransformerXL(model_config, name="par_transformer_xl")
    # partf-train's defaults, the warm-up at most half of a short run.
    warmup = min(TrainConfig.warmup_steps, total_steps // 2)
    _, optimizer = TrainConfig(warmup_steps=warmup).schedule_and_optimizer(total_steps)
    model.compile(optimizer=optimizer, jit_compile=True, steps_per_execution=spe)
    return model


def timed_fit(model: Any, x: np.ndarray, y: np.ndarray, batch: int) -> tuple[float, float]:
    """Seconds for one `fit` pass over x, y (ends when the last step's loss is on the
    host), and that loss."""
    start = time.perf_counter()
    history = model.fit(x, y, batch_size=batch, shuffle=False, epochs=1, verbose=0)
    loss = float(history.history["loss"][-1])
    return time.perf_counter() - start, loss


def measure(
    config: str,
    precision: str,
    spe: int,
    inputs: np.ndarray,
    targets: np.ndarray,
    args: argparse.Namespace,
) -> dict[str, Any]:
    import keras

    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(0)
    n, batch, seq_len = inputs.shape
    steps = max(spe, args.steps // spe * spe)
    model = build(config, args.vocab_size, batch, FULL_RUN_STEPS, spe)
    warm = 2 * spe
    compile_seconds, _ = timed_fit(model, cycled(inputs, warm), cycled(targets, warm), batch)
    x, y = cycled(inputs, steps), cycled(targets, steps)
    seconds, losses = [], []
    for _ in range(args.repeats):
        s, loss = timed_fit(model, x, y, batch)
        seconds.append(s)
        losses.append(loss)
    rate = steps / statistics.median(seconds)
    shape = {**SHAPES[config], **COMMON, "vocab_size": args.vocab_size}
    tail_rows = typical_block_rows(targets[:64], COMMON["cutoffs"], batch * seq_len)
    flops = flops_per_step(shape, batch, seq_len, tail_rows)
    result: dict[str, Any] = {
        "config": config,
        "precision": precision,
        "spe": spe,
        "steps_per_second": rate,
        "tokens_per_second": rate * batch * seq_len,
        "step_ms": 1000 / rate,
        "first_call_seconds": compile_seconds,
        "gflop_per_step": flops / 1e9,
        "achieved_tflops": flops * rate / 1e12,
        "final_loss": losses[-1],
        "repeat_seconds": seconds,
    }
    if args.evaluate and precision == "float32" and spe == max(args.spe):
        from partf.training.evaluation.jax_evaluator import JaxEvaluator

        evaluator = JaxEvaluator(model)
        pairs = list(zip(inputs, targets, strict=True))
        evaluator.evaluate(pairs)  # compiles (once per split length)
        start = time.perf_counter()
        stats = evaluator.evaluate(pairs)
        eval_rate = stats.num_batches / (time.perf_counter() - start)
        result["eval_batches_per_second"] = eval_rate
        result["eval_over_train"] = eval_rate / rate
    return result


def full_run(inputs: np.ndarray, targets: np.ndarray, args: argparse.Namespace) -> dict:
    """A fresh base model trained for --full_run_steps steps in one `fit` call."""
    import keras

    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    steps, spe = args.full_run_steps, max(args.spe)
    batch = inputs.shape[1]
    start = time.perf_counter()
    model = build("base", args.vocab_size, batch, steps, spe)
    _, loss = timed_fit(model, cycled(inputs, steps), cycled(targets, steps), batch)
    wall = time.perf_counter() - start
    return {
        "steps": steps,
        "spe": spe,
        "wall_seconds": wall,
        # With the persistent cache on, compiling may have been a cache read.
        "compilation_included": not args.compilation_cache,
        "final_loss": loss,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| config | precision | steps/exec | steps/s | ms/step | tokens/s | TFLOP/s | eval/train |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ratio = f"{r['eval_over_train']:.1f}x" if "eval_over_train" in r else ""
        lines.append(
            f"| {r['config']} | {r['precision']} | {r['spe']} | {r['steps_per_second']:.1f} "
            f"| {r['step_ms']:.2f} | {r['tokens_per_second']:,.0f} "
            f"| {r['achieved_tflops']:.3f} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", default=None, help="write records to this .npz and stop")
    parser.add_argument("--records", default=str(original_dir() / "tfrecords_valid"))
    parser.add_argument("--batches", default=None, help=".npz from --export (else Zipf tokens)")
    parser.add_argument("--vocab_size", type=int, default=12000)
    parser.add_argument("--configs", nargs="+", default=["base", "tiny"], choices=SHAPES)
    parser.add_argument("--precisions", nargs="+", default=["float32"])
    parser.add_argument("--spe", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--steps", type=int, default=1024, help="steps per timed fit call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no_evaluate", dest="evaluate", action="store_false")
    parser.add_argument("--full_run_steps", type=int, default=0, help=f"e.g. {FULL_RUN_STEPS}")
    parser.add_argument(
        "--full_run_budget",
        type=float,
        default=float("inf"),
        help="skip the full run when the measured base rate predicts more seconds than this",
    )
    parser.add_argument(
        "--compilation_cache",
        default=None,
        help="a folder for JAX's persistent compilation cache (off by default: the full "
        "run's wall time then includes compiling)",
    )
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    if args.export:
        export(Path(args.export), args.records)
        return 0
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    if keras.backend.backend() == "jax":
        import jax

        if args.compilation_cache:
            # Same program, new jit function object (each compile()): reuse the compiled
            # code. The full run may then skip compiling.
            jax.config.update("jax_compilation_cache_dir", args.compilation_cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
        device = f"{jax.devices()[0].platform}: {jax.devices()[0].device_kind}"
    else:
        device = keras.backend.backend()
    inputs, targets, source = load_batches(args.batches, args.vocab_size)
    print(f"device {device}; keras {keras.__version__}; data {source} {inputs.shape}", flush=True)
    rows = []
    for config in args.configs:
        for precision in args.precisions:
            for spe in args.spe:
                row = measure(config, precision, spe, inputs, targets, args)
                rows.append(row)
                print(json.dumps(row), flush=True)
    figures: dict[str, Any] = {
        "device": device,
        "data": source,
        "compilation_cache": args.compilation_cache or "off",
        "rows": rows,
    }
    base = [r for r in rows if r["config"] == "base" and r["precision"] == "float32"]
    if args.full_run_steps:
        predicted = args.full_run_steps / max(r["steps_per_second"] for r in base) if base else 0
        if predicted <= args.full_run_budget:
            figures["full_run"] = full_run(inputs, targets, args)
            print(json.dumps(figures["full_run"]), flush=True)
        else:
            print(f"full run skipped: predicted {predicted:.0f} s > --full_run_budget")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
