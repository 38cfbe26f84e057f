"""Benchmark: partf against the original project's own code, both training at once.

Starts the original's `train.py` (Jmkernes/PAR-Transformer-XL, from the folder given)
and `partf-train` at the same moment, on the same machine, with base_model.sh's
configuration (d_model 128, 4 heads, d_ffn 512, 6 stochastic blocks, memory 16,
cutoffs 250 and 2500, Adam to 1e-4 after 4,000 warm-up steps) on the original project's
WikiText-2 training records (32 x 32 tokens a batch). Each logs its step count with a
timestamp (the original every 100 steps, partf every --log_every); the rates are measured
over the same wall-clock window, from when both have compiled (their second logged mark)
to when the first of them stops, so that both share the machine for the whole window.

The original needs TensorFlow with the legacy Keras (`tf_keras`), tensorflow-text,
sentencepiece and tensorboard in its own Python (--original_python). Its train.py
needs one change to run on TensorFlow 2.21: the learning-rate schedule's step arrives
as int64, so cast it to float32 at the top of `CustomSchedule.__call__`
(`step = tf.cast(step, tf.float32)`); this script refuses an unpatched copy in one line.

Run:
    python benchmarks/vs_original.py --original_code ~/PAR-Transformer-XL \\
        --original_python ~/origvenv/bin/python --seconds 300

Prints the two rates and their ratio; --json writes them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_data import original_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: base_model.sh's model and schedule, flags both programs take with the same meaning.
BASE_FLAGS = [
    "--d_model=128",
    "--num_heads=4",
    "--d_ffn=512",
    "--num_layers=6",
    "--mem_len=16",
    "--dropout_rate=0.1",
    "--cutoffs=250",
    "--cutoffs=2500",
    "--proj_factor=4",
    "--warmup_steps=4000",
    "--tau_start=1.0",
    "--tau_end=0.1",
    "--tau_is_trainable=False",
    "--opt_name=adam",
    "--max_lr=1e-4",
    "--straight_through=False",
    "--epochs=1",
]
_STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
#: A logged step of each program: partf's "step N/..."; the original's "Iteration N/...",
#: in its own format or, once tf_keras has loaded absl, in absl's ("I1201 16:19:01.71 ...").
PATTERNS = {
    "original": re.compile(
        r"(?:" + _STAMP + r" \[INFO\]|I(\d{4}) (\d\d:\d\d:\d\d\.\d+) .*?\]) Iteration (\d+)/"
    ),
    "partf": re.compile(_STAMP + r" \[INFO\] step (\d+)/"),
}


def marks(log: Path, which: str) -> list[tuple[float, int]]:
    """(seconds since the epoch, steps done) of every step the log records."""
    found = []
    if not log.is_file():
        return found
    year = datetime.date.fromtimestamp(log.stat().st_mtime).year
    for match in PATTERNS[which].finditer(log.read_text(errors="replace")):
        groups = [g for g in match.groups() if g is not None]
        if len(groups) == 3:  # absl: month and day, time, step
            day, clock, step = groups
            when = datetime.datetime.strptime(f"{year}{day} {clock}", "%Y%m%d %H:%M:%S.%f")
        else:
            stamp, step = groups
            when = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
        found.append((when.timestamp(), int(step)))
    return found


def steps_at(points: list[tuple[float, int]], t: float) -> float:
    """Steps done at time t, linear between the logged marks."""
    for (t0, s0), (t1, s1) in zip(points, points[1:], strict=False):
        if t0 <= t <= t1:
            return s0 + (s1 - s0) * (t - t0) / max(t1 - t0, 1e-9)
    raise ValueError("t outside the logged marks")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--original_code", required=True, help="the original's checkout")
    parser.add_argument("--original_python", default=sys.executable)
    parser.add_argument("--seconds", type=float, default=300, help="how long both train")
    parser.add_argument("--log_every", type=int, default=32, help="partf's logging interval")
    parser.add_argument("--json", help="write the rates here")
    parser.add_argument("--from_logs", help="only measure the logs of an earlier run's folder")
    args = parser.parse_args(argv)
    if args.from_logs:
        work = Path(args.from_logs)
        return measure(work / "original.log", work / "logs" / "partf" / "training.log", args)
    code = Path(args.original_code)
    train_py = code / "train.py"
    if not train_py.is_file() or "tf.cast(step, tf.float32)" not in train_py.read_text():
        print(
            f"vs_original: {train_py} is missing or unpatched; cast the schedule's step to "
            "float32 first (see this script's docstring).",
            file=sys.stderr,
        )
        return 2
    records = original_dir()
    data = [
        f"--train_directory={records / 'tfrecords_train'}",
        "--valid_directory=",
        "--test_directory=",
        f"--sp_model_prefix={records / 'tokenizer' / 'wiki2_12k'}",
    ]
    work = Path(tempfile.mkdtemp(prefix="partf-vs-original-"))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    original_log = work / "original.log"
    original = subprocess.Popen(
        [
            args.original_python,
            str(train_py),
            *data[:1],
            f"--valid_directory={records / 'tfrecords_valid'}",
            f"--test_directory={records / 'tfrecords_test'}",
            data[3],
            *BASE_FLAGS,
            "--model_name=orig",
        ],
        cwd=work,
        env={**env, "TF_USE_LEGACY_KERAS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=original_log.open("w"),
    )
    partf = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "partf.cli.train",
            *data,
            *BASE_FLAGS,
            "--model_name=partf",
            f"--output_dir={work}",
            "--steps_per_execution=32",
            f"--log_every={args.log_every}",
            "--jit_compile=True",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    partf_log = work / "logs" / "partf" / "training.log"
    time.sleep(args.seconds)
    for process in (original, partf):
        process.terminate()
    for process in (original, partf):
        process.wait(timeout=120)
    return measure(original_log, partf_log, args)


def measure(original_log: Path, partf_log: Path, args: argparse.Namespace) -> int:
    """Prints (and with --json writes) both rates over their common window."""
    got = {"original": marks(original_log, "original"), "partf": marks(partf_log, "partf")}
    for which, points in got.items():
        if len(points) < 3:
            print(
                f"vs_original: {which} logged {len(points)} steps; give --seconds more",
                file=sys.stderr,
            )
            return 1
    start = max(points[1][0] for points in got.values())
    stop = min(points[-1][0] for points in got.values())
    rates = {
        which: (steps_at(points, stop) - steps_at(points, start)) / (stop - start)
        for which, points in got.items()
    }
    result = {
        "window_seconds": stop - start,
        "steps_per_second": rates,
        "ratio": rates["partf"] / rates["original"],
        "logs": str(original_log.parent),
    }
    print(
        f"both at once over {stop - start:.0f} s: original {rates['original']:.2f} steps/s, "
        f"partf {rates['partf']:.2f} steps/s, partf / original {result['ratio']:.2f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
