"""Benchmark: measured speed of every finished model of a study, side by side.

FLOPs are not time. For each finished run of a `partf-study` folder (its final
`.keras` model), on this machine and in one process, this measures:

- training tokens/s: the loaded model compiled as partf-train compiles it (Adam, XLA,
  --spe steps per execution) and trained with `fit` on batches of the run's own shape
  (batch x sequence length from its results.json), after a call that compiles;
- evaluation ms per batch: `partf.training.evaluation.perplexity.Evaluator` (XLA, memory carried)
  over --eval_batches batches of that shape, after a pass that compiles;
- generation ms per token at --context tokens of context: `partf.generation.Generator`
  (carried state: each token fed alone with the model's own XL memory or running sums,
  batch 1; a model without XL memory is given one of --context tokens), the prompt's
  pass not timed, --tokens tokens drawn in one compiled loop.

The models are measured round-robin, --repeats times, and each figure is the best of its
repeats, so that a change of the machine's load hits every model alike. Tokens are
random (speed does not depend on them). Writes `speed.json` into the study folder, which
the study's report (`partf-study PLAN --out DIR --report`) shows beside each arm's FLOPs.

It uses only what partf's public interface had when the long-context study was pinned,
so it measures a pinned study with the pinned code: run it with that worktree's Python.

With --per_architecture, runs that built the same model (the same model config and batch
shape: the seeds of one arm, a from-scratch arm and a conversion to its blocks) are timed
once, by their first run, and every one of them gets those figures with `timed_as` naming
it: a model's speed is its computation, which its weights do not change. A study of three
seeds is then timed in a third of the time, and its report can use side-by-side figures
for every run.

Run: python benchmarks/study_speed.py DIR [--runs txl-s0 txl4-s0] [--repeats 3]
     python benchmarks/study_speed.py DIR --seq_len 1024 --context 4096 --out DIR/speed_1024.json
     python benchmarks/study_speed.py DIR --per_architecture
Pause other work on the machine while it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def finished_runs(study: Path, names: list[str] | None) -> dict[str, Path]:
    """Run name -> its final .keras file, for every finished run (or those named)."""
    found = {}
    for results in sorted(study.glob("runs/*/checkpoints/*/results.json")):
        name = results.parent.name
        model = results.parent / f"{name}.keras"
        if model.is_file() and (names is None or name in names):
            found[name] = model
    return found


#: Model settings that change what a run learns or pays, not what its model computes: a
#: search's measured prices and their weight in the loss, and the steps over which its
#: temperature anneals (set from the run's length: a 2,000-step conversion and a
#: 3,000-step run of the same blocks differ only there).
NOT_COMPUTATION = ("candidate_costs", "search_cost_weight", "search_cost", "tau_steps")


def structure_key(results: dict[str, Any]) -> str:
    """What a run's model computes, from its results.json: the model config without the
    settings of NOT_COMPUTATION, and the batch shape it trained at."""
    model = dict((results.get("config") or {}).get("model") or {})
    for key in NOT_COMPUTATION:
        model.pop(key, None)
    shape = results.get("data") or {}
    key = {"model": model, "batch_size": shape.get("batch_size"), "seq_len": shape.get("seq_len")}
    return json.dumps(key, sort_keys=True)


def group_by_structure(runs: dict[str, Path]) -> dict[str, list[str]]:
    """The first run of each group of runs (by name) that built the same model -> every run
    of the group, the first included."""
    groups: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    for name, path in runs.items():
        key = structure_key(json.loads((path.parent / "results.json").read_text()))
        groups.setdefault(first.setdefault(key, name), []).append(name)
    return groups


class Measured:
    """One model's compiled training, evaluation and generation, ready to time."""

    def __init__(self, path: Path, args: argparse.Namespace) -> None:
        import keras

        import partf.models  # noqa: F401  (registers partf's classes)
        from partf.generation import Generator, Sampling, reconfigure, stateless_attentions
        from partf.training.config import TrainConfig

        try:
            from partf.training.evaluation.perplexity import Evaluator
        except ImportError:  # a study pinned before evaluation became a package
            from partf.training.perplexity import Evaluator

        results = json.loads((path.parent / "results.json").read_text())
        shape = results["data"]
        self.batch, self.seq_len = int(shape["batch_size"]), int(shape["seq_len"])
        if args.seq_len:  # another length, the same tokens per batch (at least one row)
            self.batch = max(self.batch * self.seq_len // args.seq_len, 1)
            self.seq_len = args.seq_len
        self.model = keras.saving.load_model(path, compile=False)
        if self.batch != self.model.config.batch_size:  # its memory variables hold the rows
            self.model = reconfigure(self.model, batch_size=self.batch)
        vocab = self.model.config.vocab_size
        rng = np.random.default_rng(0)
        steps = args.spe * args.train_calls
        tokens = rng.integers(1, vocab, size=(steps * self.batch, self.seq_len + 1))
        self.x, self.y = tokens[:, :-1].astype("int32"), tokens[:, 1:].astype("int32")
        _, optimizer = TrainConfig(warmup_steps=10).schedule_and_optimizer(10 * steps)
        self.model.compile(optimizer=optimizer, jit_compile=True, steps_per_execution=args.spe)
        import tensorflow as tf

        batches = rng.integers(1, vocab, size=(args.eval_batches, self.batch, self.seq_len + 1))
        self.eval_data = tf.data.Dataset.from_tensor_slices(
            (batches[:, :, :-1].astype("int32"), batches[:, :, 1:].astype("int32"))
        )
        self.eval_batches = args.eval_batches
        self.evaluator = Evaluator(self.model, jit_compile=True)
        # `forward` is pure: generation carries its own batch-1 state, not the model's.
        # A model trained without XL memory (mem_len=0, as the recall study's) carries no
        # context in its softmax places: it generates with a memory as long as --context,
        # the cache a decoder of that context holds, so that every token sees the prompt.
        generating = self.model
        if stateless_attentions(self.model):
            generating = reconfigure(self.model, mem_len=args.context, batch_size=1)
        self.generator = Generator(generating, mode="carried", jit_compile=False)
        self.prompt = rng.integers(1, vocab, size=(1, args.context)).astype("int32")
        self.tokens = args.tokens
        self.sampling = Sampling()
        self.best: dict[str, float] = {}
        self.runs = 0

    def time_once(self) -> None:
        began = time.perf_counter()
        self.model.fit(self.x, self.y, batch_size=self.batch, shuffle=False, epochs=1, verbose=0)
        train = len(self.x) * self.seq_len / (time.perf_counter() - began)
        began = time.perf_counter()
        self.evaluator.evaluate(self.eval_data)
        evaluate = 1000 * (time.perf_counter() - began) / self.eval_batches
        start = self.generator.start(self.prompt)
        began = time.perf_counter()
        tokens, _ = self.generator.decode(*start, self.tokens, self.sampling)
        np.asarray(tokens)
        generate = 1000 * (time.perf_counter() - began) / self.tokens
        self.runs += 1
        if self.runs == 1:
            return  # the first pass compiles
        for key, value, better in (
            ("train_tokens_per_second", train, max),
            ("eval_ms_per_batch", evaluate, min),
            ("generate_ms_per_token", generate, min),
        ):
            self.best[key] = better(self.best.get(key, value), value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="the study's --out folder")
    parser.add_argument("--runs", nargs="+", help="these runs only (default: every finished)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds after warm-up")
    parser.add_argument("--spe", type=int, default=8, help="training steps per execution")
    parser.add_argument("--train_calls", type=int, default=2, help="executions per timing")
    parser.add_argument("--eval_batches", type=int, default=16)
    parser.add_argument("--context", type=int, default=256, help="tokens before generation")
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated per timing")
    parser.add_argument(
        "--seq_len",
        type=int,
        default=0,
        help="time at this length instead of the run's, with as many tokens per batch "
        "(fewer rows); for models without XL memory, e.g. the recall study's",
    )
    parser.add_argument(
        "--per_architecture",
        action="store_true",
        help="time one run of each model config and batch shape, and give its figures to "
        "the others (with timed_as)",
    )
    parser.add_argument("--out", help="where to write the figures (default: DIR/speed.json)")
    args = parser.parse_args(argv)
    study = Path(args.study)
    runs = finished_runs(study, args.runs)
    if not runs:
        print(f"study_speed: {study} holds no finished run with a .keras model.", file=sys.stderr)
        return 2
    import platform

    groups = group_by_structure(runs) if args.per_architecture else {n: [n] for n in runs}
    measured = {}
    for name in groups:
        path = runs[name]
        print(f"study_speed: loading {name}", file=sys.stderr, flush=True)
        measured[name] = Measured(path, args)
    for round_ in range(args.repeats + 1):
        for model in measured.values():
            model.time_once()
        print(f"study_speed: round {round_ + 1} of {args.repeats + 1}", file=sys.stderr)
    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.exists() else []:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    out: dict[str, Any] = {
        "machine": f"{os.cpu_count()}-core {cpu}",
        "settings": vars(args),
        "runs": {
            member: dict(model.best, **({"timed_as": name} if member != name else {}))
            for name, model in measured.items()
            for member in groups[name]
        },
    }
    path = Path(args.out) if args.out else study / "speed.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    for name, best in out["runs"].items():
        if "timed_as" in best:
            continue
        print(
            f"{name} ({len(groups[name])} runs): train "
            f"{best['train_tokens_per_second']:,.0f} tokens/s, eval "
            f"{best['eval_ms_per_batch']:.1f} ms/batch, generate "
            f"{best['generate_ms_per_token']:.1f} ms/token"
        )
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
