"""Benchmark: steady-state training throughput through partf-train's own code path.

For each configuration (base: base_model.sh's model; tiny: d_model 16, 2 heads,
d_ffn 32, 2 blocks), each jit_compile setting and each steps_per_execution, a
fresh process runs `partf.training.trainer.Trainer` exactly as `partf-train`
does (same data loading, model, optimizer, callbacks, checkpoints at epoch ends)
and times the ends of its compiled executions. Steps per second is the median
over windows of executions inside one epoch, after the first epoch's first
executions (compilation and warm-up) are dropped.

In the same run it measures:
- the machine's matmul rate (1024x128 by 128x512, float32, XLA, best of 3 rounds of
  20 products, as benchmarks/matmul_rate.py measures it), the analytic
  FLOPs of one training step and the fraction of that rate a step achieves;
- batches per second of `load_tfrecords` alone (the input pipeline);
- steps per second of a full evaluation pass (forward only) over the records.

Writes `train_throughput.md` (a Markdown table) and `train_throughput.json` to
--out_dir and prints the table.

Run: .venv/bin/python benchmarks/train_throughput.py
     [--configs base tiny] [--jit on off] [--spe 1 8 32] [--records DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from shared_data import original_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ORIGINAL = original_dir()
SHAPES = {
    # base_model.sh's model (the original project's base configuration).
    "base": {"d_model": 128, "num_heads": 4, "d_ffn": 512, "num_layers": 6},
    # Arithmetic negligible: what is left is per-step overhead.
    "tiny": {"d_model": 16, "num_heads": 2, "d_ffn": 32, "num_layers": 2},
}
COMMON = {"mem_len": 16, "dropout_rate": 0.1, "cutoffs": [250, 2500], "proj_factor": 4}
# The original project's train.py on this kind of machine (issue 7; second epoch,
# from its own timestamps): steps per second.
ORIGINAL_STEPS_PER_SECOND = {"base": 5.46, "tiny": 28.0}
TARGETS = {"base": 8.0, "tiny": 280.0}

log = logging.getLogger("train_throughput")


# ------------------------------------------------------------------ arithmetic
def flops_per_step(model: dict[str, Any], batch: int, seq_len: int, tail_rows: list[int]) -> float:
    """Analytic FLOPs of one training step (forward and backward, matmuls only).

    Counts every candidate of every stochastic block (attention and dense are both
    computed), relative attention's projections of queries, keys and values over
    memory plus segment, its per-layer position projection, the two score terms and
    the weighted sum of values, and the adaptive softmax (head on every position,
    tail i on `tail_rows[i]` rows). Backward is counted as twice the forward.
    """
    d, f, layers = model["d_model"], model["d_ffn"], model["num_layers"]
    mem = model["mem_len"]
    keys = mem + seq_len
    tokens = batch * seq_len
    attention = (
        tokens * d * d * 2  # queries and output projection
        + batch * keys * d * d * 2  # keys and values of memory + segment
        + (keys + 1) * d * d  # projected relative positions
        + tokens * keys * d * 3  # content scores, position scores, weighted values
    )
    dense = tokens * d * f * 2
    vocab = model["vocab_size"]
    cutoffs = model["cutoffs"]
    bounds = [cutoffs[0], *cutoffs[1:], vocab]
    dims = [max(1, d // model["proj_factor"] ** (i + 1)) for i in range(len(cutoffs))]
    softmax = tokens * d * (cutoffs[0] + len(cutoffs))
    for i, dim in enumerate(dims):
        softmax += tokens * d * dim + tail_rows[i] * dim * (bounds[i + 1] - bounds[i])
    macs = layers * (attention + dense) + softmax
    return 3 * 2 * macs


def typical_block_rows(target_batches: Any, cutoffs: list[int], positions: int) -> list[int]:
    """Rows each tail is scored on in a typical batch: the smallest static block
    (N/8, N/4, N/2 or N) holding the median count, over `target_batches` (numpy
    arrays of target ids), of the targets in that tail."""
    import numpy as np

    from partf.layers.adaptive_softmax import _block_sizes

    counts: list[list[int]] = [[] for _ in cutoffs]
    for t in target_batches:
        for i, low in enumerate(cutoffs):
            high = cutoffs[i + 1] if i + 1 < len(cutoffs) else np.inf
            counts[i].append(int(((t >= low) & (t < high)).sum()))
    sizes = _block_sizes(positions)
    return [next(s for s in sizes if s >= statistics.median(c)) for c in counts]


def tail_block_rows(records: str, cutoffs: list[int], positions: int) -> list[int]:
    """`typical_block_rows` over the first 64 batches of `records`."""
    from partf.data.tfrecords import load_tfrecords

    targets = (t.numpy() for _, t in load_tfrecords(records).take(64))
    return typical_block_rows(targets, cutoffs, positions)


def matmul_rate(rounds: int = 3, repeats: int = 20) -> float:
    """FLOP/s of a 1024x128 by 128x512 float32 matmul under XLA on this machine: the
    fastest of `rounds` rounds, timed as benchmarks/matmul_rate.py times it."""
    import numpy as np
    from matmul_rate import best_rate, products

    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 128), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    _, xla, _ = products(a, b)
    return 1e9 * best_rate(xla, 2.0 * 1024 * 128 * 512, rounds, repeats)


def pipeline_rate(records: str, passes: int = 3) -> float:
    """Batches per second of `load_tfrecords` alone, read to the end `passes` times."""
    from partf.data.tfrecords import load_tfrecords

    dataset = load_tfrecords(records)
    count = sum(1 for _ in dataset)  # first pass: file cache warm-up
    start = time.perf_counter()
    for _ in range(passes):
        for _ in dataset:
            pass
    return count * passes / (time.perf_counter() - start)


# ---------------------------------------------------------------------- worker
def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One (configuration, jit, steps_per_execution) run in this process."""
    import keras

    from partf.training.config import TrainConfig
    from partf.training.trainer import Trainer

    ends: list[tuple[int, float]] = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append((trainer.progress.global_step, time.perf_counter()))

        def on_epoch_begin(self, epoch, logs=None):
            ends.append((-1, time.perf_counter()))  # marks an epoch boundary

    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(
            train_directory=args.records,
            valid_directory="",
            test_directory="",
            sp_model_prefix=args.sp_model_prefix,
            output_dir=out,
            model_name="throughput",
            max_steps=args.steps,
            warmup_steps=100,
            steps_per_execution=args.spe,
            jit_compile=args.jit == "on",
            compiled_loop=args.compiled_loop,
            mixed_precision=args.mixed_precision,
            log_every=100,
            model={**SHAPES[args.config], **COMMON},
        )
        trainer = Trainer(config, callbacks=[Timer()])
        started = time.perf_counter()
        trainer.run()
        total = time.perf_counter() - started
        rates = _window_rates(ends, skip=max(2, math.ceil(16 / args.spe)))
        result: dict[str, Any] = {
            "config": args.config,
            "jit": args.jit,
            "spe": args.spe,
            "steps": trainer.progress.global_step,
            "steps_per_second": statistics.median(rates) if rates else None,
            "windows": len(rates),
            "run_seconds": total,
            "tokens_per_step": trainer.train_split.batch_size * trainer.train_split.seq_len,
            "model": trainer.model_config.to_dict(),
            "batch_size": trainer.train_split.batch_size,
            "seq_len": trainer.train_split.seq_len,
        }
        if args.evaluate:
            dataset = trainer.train_split.dataset
            trainer.evaluator.evaluate(dataset)  # compiles
            start = time.perf_counter()
            stats = trainer.evaluator.evaluate(dataset)
            result["eval_steps_per_second"] = stats.num_batches / (time.perf_counter() - start)
    return result


def _window_rates(ends: list[tuple[int, float]], skip: int) -> list[float]:
    """Steps per second over windows of consecutive executions inside one epoch.

    Drops the first `skip` executions (compilation, warm-up) and every interval
    that crosses an epoch boundary (memory reset, checkpoint).
    """
    rates, seen = [], 0
    window: list[tuple[int, float]] = []
    for step, moment in ends:
        if step < 0:
            window = []
            continue
        seen += 1
        if seen <= skip:
            continue
        window.append((step, moment))
        if len(window) >= 2 and window[-1][1] - window[0][1] >= 1.0:
            (s0, t0), (s1, t1) = window[0], window[-1]
            rates.append((s1 - s0) / (t1 - t0))
            window = [window[-1]]
    return rates


# ---------------------------------------------------------------------- driver
def run_one(args: argparse.Namespace, config: str, jit: str, spe: int, evaluate: bool) -> dict:
    steps = args.steps or (args.base_steps if config == "base" else args.tiny_steps)
    if jit == "off":
        steps = max(spe * 8, steps // 3)  # eager-graph steps are slow: fewer of them
    steps = math.ceil(steps / spe) * spe
    command = [
        sys.executable,
        __file__,
        "--worker",
        f"--config={config}",
        f"--jit={jit}",
        f"--spe={spe}",
        f"--steps={steps}",
        f"--records={args.records}",
        f"--sp_model_prefix={args.sp_model_prefix}",
    ]
    if evaluate:
        command.append("--evaluate")
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        return {"config": config, "jit": jit, "spe": spe, "error": tail}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict], extras: dict[str, Any]) -> str:
    lines = [
        "| config | jit | steps/exec | steps/s | tokens/s | GFLOP/step | % of matmul rate "
        "| original steps/s | target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['jit']} | {r['spe']} | failed: see JSON |||||")
            continue
        rate = r["steps_per_second"]
        gflop = r["flops_per_step"] / 1e9
        share = 100 * r["flops_per_step"] * rate / extras["matmul_flops"]
        lines.append(
            f"| {r['config']} | {r['jit']} | {r['spe']} | {rate:.2f} | "
            f"{rate * r['tokens_per_step']:,.0f} | {gflop:.2f} | {share:.0f}% | "
            f"{ORIGINAL_STEPS_PER_SECOND[r['config']]} | {TARGETS[r['config']]} |"
        )
    lines += [
        "",
        f"- matmul rate (1024x128 by 128x512, float32, XLA): "
        f"{extras['matmul_flops'] / 1e9:.1f} GFLOP/s",
        f"- load_tfrecords alone: {extras['pipeline_batches_per_second']:,.0f} batches/s "
        f"({extras['pipeline_ratio']:.0f}x the fastest base training rate; target 20x)",
    ]
    for r in rows:
        if "eval_steps_per_second" in r:
            lines.append(
                f"- evaluation ({r['config']}, jit {r['jit']}): "
                f"{r['eval_steps_per_second']:.1f} batches/s, "
                f"{r['eval_steps_per_second'] / r['steps_per_second']:.1f}x its training "
                "rate (target 3x)"
            )
    lines.append(f"- machine: {extras['machine']}")
    return "\n".join(lines) + "\n"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cores, {cpu}, load average {load:.1f} at the end"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["base", "tiny"], choices=sorted(SHAPES))
    parser.add_argument("--jit", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--spe", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--records", default=str(ORIGINAL / "tfrecords_valid"))
    parser.add_argument("--sp_model_prefix", default=str(ORIGINAL / "tokenizer" / "wiki2_12k"))
    parser.add_argument("--base_steps", type=int, default=448, help="steps per base run")
    parser.add_argument("--tiny_steps", type=int, default=2048, help="steps per tiny run")
    parser.add_argument("--steps", type=int, default=0, help="steps per run (overrides both)")
    parser.add_argument("--out_dir", default="results/train_throughput")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", default="base", help=argparse.SUPPRESS)
    parser.add_argument("--evaluate", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compiled_loop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mixed_precision", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.jit = args.jit[0] if isinstance(args.jit, list) else args.jit
        args.spe = args.spe[0] if isinstance(args.spe, list) else args.spe
        print(json.dumps(measure(args)))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not Path(args.records).is_dir():
        print(
            f"train_throughput: error: no records at {args.records}; pass --records DIR "
            "and --sp_model_prefix PREFIX (e.g. from ./create_tfrecords.sh)",
            file=sys.stderr,
        )
        return 2
    rows = []
    for config in args.configs:
        for jit in args.jit:
            for spe in args.spe:
                evaluate = jit == "on" and spe == max(args.spe)
                log.info("running %s, jit %s, steps_per_execution %d ...", config, jit, spe)
                row = run_one(args, config, jit, spe, evaluate)
                if "error" not in row:
                    positions = row["batch_size"] * row["seq_len"]
                    tails = tail_block_rows(args.records, row["model"]["cutoffs"], positions)
                    row["flops_per_step"] = flops_per_step(
                        row["model"], row["batch_size"], row["seq_len"], tails
                    )
                    log.info("  %.2f steps/s", row["steps_per_second"])
                else:
                    log.info("  failed:\n%s", row["error"])
                rows.append(row)
    import tensorflow as tf  # after the workers: this process only times the extras

    tf.config.set_visible_devices([], "GPU")
    pipeline = pipeline_rate(args.records)
    measured = [r for r in rows if "error" not in r]
    base = [r["steps_per_second"] for r in measured if r["config"] == "base"]
    fastest = max(base or [r["steps_per_second"] for r in measured] or [1.0])
    extras = {
        "matmul_flops": matmul_rate(),
        "pipeline_batches_per_second": pipeline,
        "pipeline_ratio": pipeline / fastest,
        "machine": machine(),
    }
    text = table(rows, extras)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_throughput.md").write_text(text)
    (out / "train_throughput.json").write_text(json.dumps({"runs": rows, **extras}, indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
