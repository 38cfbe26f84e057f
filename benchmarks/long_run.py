"""Long-run check: resident memory and retracing over thousands of training steps.

Trains the base configuration (or --tiny) with the real trainer (callbacks, TensorBoard,
checkpoints) for --steps steps and reports:

- resident memory (RSS) once the warm-up is over (the first --warmup_fraction of the
  steps: compilation, first checkpoint, caches filled) and at the end; the growth
  between them should stay under 5%;
- how many times the train step was traced (Python runs it only while tracing): after
  the warm-up and at the end; both must be exactly 1 (traced once, nothing retraced;
  a count of 0 means the probe missed the tracing, and fails too).

Records: --train_directory, by default the original project's WikiText-2 validation
records in the shared data folder (benchmarks/shared_data.py: $PARTF_SHARED_DATA, else
../shared/data), cycled over epochs. Without them the script stops with an error;
--random_tokens trains on random tokens instead, and says so in its report.

Example:
    python benchmarks/long_run.py                     # 5,000 steps of the base model
    python benchmarks/long_run.py --tiny --steps 600  # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_data import SharedDataMissing, original_dir, require  # noqa: E402

TINY = {"d_model": 16, "num_heads": 2, "d_ffn": 32, "num_layers": 2, "mem_len": 8}


def rss_bytes() -> int:
    """The process's current resident memory."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux
        import resource

        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def random_records(folder: Path, vocab_size: int = 12000) -> Path:
    import numpy as np

    from partf.data import context_batches, write_tfrecords

    stream = np.random.default_rng(0).integers(1, vocab_size, size=304 * 32 * 32 + 1)
    write_tfrecords(
        context_batches(stream.astype(np.int32), 32, 32),
        folder,
        vocab_size=vocab_size,
        num_tokens=len(stream),
    )
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000, help="training steps")
    parser.add_argument("--tiny", action="store_true", help="a tiny model instead of the base")
    parser.add_argument("--train_directory", default=None, help="records to train on")
    parser.add_argument(
        "--random_tokens",
        action="store_true",
        help="train on random tokens when no records are given (no shared data needed)",
    )
    parser.add_argument(
        "--sp_model_prefix", default="", help="tokenizer, for records without metadata.json"
    )
    parser.add_argument("--warmup_fraction", type=float, default=0.1)
    parser.add_argument("--steps_per_execution", type=int, default=32)
    parser.add_argument("--nojit_compile", action="store_true")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    tokenizer = args.sp_model_prefix
    records = Path(args.train_directory) if args.train_directory else None
    if records is None and not args.random_tokens:
        try:
            records = require(
                original_dir() / "tfrecords_valid",
                "the original project's validation records",
                flag="--train_directory (or --random_tokens)",
            )
            # The tokenizer gives the records' vocabulary size (they have no metadata).
            model_file = original_dir() / "tokenizer" / "wiki2_12k.model"
            tokenizer = str(require(model_file, "their tokenizer").with_suffix(""))
        except SharedDataMissing as error:
            print(f"long_run.py: error: {error}", file=sys.stderr)
            return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    from partf.training.config import TrainConfig
    from partf.training.trainer import train

    work = Path(tempfile.mkdtemp(prefix="partf-long-run-"))
    if records is None:
        records = random_records(work / "records")
    warmup_step = max(int(args.steps * args.warmup_fraction), 2 * args.steps_per_execution)

    class Probe(keras.callbacks.Callback):
        """Counts traces of the train step; samples RSS after the warm-up and at the end."""

        def __init__(self) -> None:
            super().__init__()
            self.traces = 0
            self.step = 0
            self.marks: dict[str, dict[str, float]] = {}

        def set_model(self, model) -> None:
            super().set_model(model)
            if model.train_function is None and not hasattr(model, "_probe_wrapped"):
                step = model.train_step

                def counted(data):
                    self.traces += 1  # Python runs here only while tracing
                    return step(data)

                model.train_step = counted
                model._probe_wrapped = True

        def mark(self, name: str) -> None:
            self.marks[name] = {
                "step": self.step,
                "rss_mib": rss_bytes() / 2**20,
                "traces": self.traces,
                "time": time.perf_counter(),
            }

        def on_train_batch_end(self, batch, logs=None) -> None:
            self.step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            if "warm" not in self.marks and self.step >= warmup_step:
                self.mark("warm")

        def on_train_end(self, logs=None) -> None:
            self.mark("end")

    probe = Probe()
    config = TrainConfig(
        train_directory=str(records),
        valid_directory="",
        test_directory="",
        sp_model_prefix=tokenizer,
        model_name="long_run",
        output_dir=str(work / "out"),
        epochs=10**6,
        max_steps=args.steps,
        warmup_steps=min(4000, args.steps // 10),
        steps_per_execution=args.steps_per_execution,
        jit_compile=not args.nojit_compile,
        log_every=100,
        plot_every=1000,
        model=dict(TINY) if args.tiny else {},
    )
    start = time.perf_counter()
    train(config, callbacks=[probe])
    wall = time.perf_counter() - start
    warm, end = probe.marks["warm"], probe.marks["end"]
    growth = (end["rss_mib"] - warm["rss_mib"]) / warm["rss_mib"]
    figures = {
        "configuration": "tiny" if args.tiny else "base",
        "records": "random tokens"
        if args.random_tokens and not args.train_directory
        else str(records),
        "steps": end["step"],
        "wall_seconds": round(wall, 1),
        "rss_after_warmup_mib": round(warm["rss_mib"], 1),
        "rss_after_warmup_step": warm["step"],
        "rss_end_mib": round(end["rss_mib"], 1),
        "rss_growth_percent": round(100 * growth, 2),
        "traces_after_warmup": warm["traces"],
        "traces_end": end["traces"],
        "steps_per_second_after_warmup": round(
            (end["step"] - warm["step"]) / max(end["time"] - warm["time"], 1e-9), 1
        ),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    failures = []
    if growth >= 0.05:
        failures.append(f"memory grew {100 * growth:.1f}% (5% allowed)")
    if not warm["traces"] == end["traces"] == 1:
        failures.append(
            f"the train step was traced {warm['traces']} time(s) by the warm-up and "
            f"{end['traces']} by the end (exactly 1 and 1 expected)"
        )
    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
