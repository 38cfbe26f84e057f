"""Benchmark: the original project's published table, side by side with partf.

The original (Jmkernes/PAR-Transformer-XL) publishes validation perplexity at the ends
of epochs 1, 3, 5, 10, 17 and 20 of its base configuration (README, 20 epochs on a
Colab GPU). This trains the same configuration with the original's protocol on the
original's own records (the shared data folder's `par-transformer-xl-original/`):

* base_model.sh's model (d_model 128, 4 heads, d_ffn 512, 6 blocks, memory 16, dropout
  0.1, cutoffs 250 and 2500), Adam with 4,000 warm-up steps to 1e-4 then cosine decay to
  zero over the full 20 epochs (56,540 steps of the 2,827-batch train records), tau
  1.0 -> 0.1 exponentially;
* the original's search (`--search=original`: the architecture parameters share the
  model's optimizer) with Gumbel-sampled blocks at evaluation (`--eval_mode=sample`);
* validation on the original's valid records at the end of every epoch.

It reports validation perplexity at every epoch by the original's figure (mean over
batches of exp(batch loss)) and exactly (exp of the mean token loss), beside the seed's
six figures, then the test perplexity at the end, the time taken and the machine.

Each run is partf-train itself in a subprocess, named `<name>_seed<seed>` under --out.
Runs are resumable: running the same command again continues each run from its newest
checkpoint on the same 20-epoch schedule. `--until_epoch N` stops every run after
epoch N's validation (SIGINT: partf-train checkpoints and exits), leaving the schedule
unchanged, so a run can be taken five epochs now and finished later.

Examples:
    python benchmarks/seed_table.py                                  # 20 epochs, seed 0
    python benchmarks/seed_table.py --seeds 0 1 --until_epoch 5     # the spread, 5 epochs
    python benchmarks/seed_table.py --name probs \\
        --flags=--arch_parameterization=probabilities               # a variant
    python benchmarks/seed_table.py --report_only                   # tables from the logs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_data import SharedDataMissing, original_dir, require  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: The original README's validation perplexity at the end of these epochs.
SEED_TABLE = {1: 114.4, 3: 62.33, 5: 51.88, 10: 42.61, 17: 39.57, 20: 39.41}

#: The original's base_model.sh and protocol, as partf-train flags.
PROTOCOL = [
    "--d_model=128",
    "--num_heads=4",
    "--d_ffn=512",
    "--num_layers=6",
    "--mem_len=16",
    "--dropout_rate=0.1",
    "--cutoffs=250",
    "--cutoffs=2500",
    "--proj_factor=4",
    "--straight_through=False",
    "--max_lr=1e-4",
    "--warmup_steps=4000",
    "--lr_schedule=cosine",
    "--tau_start=1.0",
    "--tau_end=0.1",
    "--tau_is_trainable=False",
    "--search=original",
    "--eval_mode=sample",
    "--opt_name=adam",
    "--epochs=20",
    "--eval_every=0",
    "--steps_per_execution=32",
    "--log_every=500",
]

_VALIDATION = re.compile(
    r"validation at step (\d+)(?: with (\w+) block weights[^:]*)?: loss ([\d.]+), "
    r"perplexity ([\d.]+) \(original's figure ([\d.]+)\)"
)
#: A log line's time, to the second.
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.M)
#: The first line partf-train writes to training.log at each launch.
_START = "[INFO] configuration:"
_EPOCH = re.compile(r"(\d+) batches of \d+x\d+ per epoch")


def cpu_name() -> str:
    """The processor's model name and core count, for the report."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def validations(log_file: Path) -> dict[int, tuple[float, float, float, str | None]]:
    """step -> (loss, exact perplexity, original's figure, block weights) of each
    validation logged; a step validated twice (a resumed run) keeps its last figures.
    The block weights are None for the run's own eval_mode, or the mode a search was
    scored with instead while its pi was frozen ("expected")."""
    found: dict[int, tuple[float, float, float, str | None]] = {}
    if log_file.exists():
        for match in _VALIDATION.finditer(log_file.read_text(errors="replace")):
            step, weights, loss, exact, original = match.groups()
            found[int(step)] = (float(loss), float(exact), float(original), weights)
    return found


def logged_seconds(log_file: Path) -> float | None:
    """Wall time the run's launches spent, from training.log's timestamps: for each
    launch (from its "configuration:" line to its last line), last minus first."""
    import datetime

    if not log_file.exists():
        return None
    launches: list[list[datetime.datetime]] = []  # [first, last] timestamp of each
    for line in log_file.read_text(errors="replace").splitlines():
        match = _STAMP.match(line)
        if not match:
            continue
        when = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
        if _START in line:
            launches.append([when, when])
        elif launches:  # lines before the first launch's are not the run's
            launches[-1][1] = when
    return sum((last - first).total_seconds() for first, last in launches)


def batches_per_epoch(log_file: Path) -> int | None:
    if not log_file.exists():
        return None
    match = _EPOCH.search(log_file.read_text(errors="replace"))
    return int(match.group(1)) if match else None


def train(run: str, seed: int, flags: list[str], out: Path, until_epoch: int | None) -> None:
    """Runs (or resumes) one partf-train run, stopping after `until_epoch`'s validation."""
    records = original_dir()
    command = [
        sys.executable,
        "-m",
        "partf.cli.train",
        f"--train_directory={records / 'tfrecords_train'}",
        f"--valid_directory={records / 'tfrecords_valid'}",
        f"--test_directory={records / 'tfrecords_test'}",
        f"--sp_model_prefix={records / 'tokenizer' / 'wiki2_12k'}",
        *PROTOCOL,
        f"--seed={seed}",
        f"--model_name={run}",
        f"--output_dir={out}",
        *flags,
    ]
    log_file = out / "logs" / run / "training.log"
    results = out / "checkpoints" / run / "results.json"
    if results.exists():
        print(f"{run}: finished earlier (results.json)", flush=True)
        return
    per_epoch = batches_per_epoch(log_file)
    if (
        until_epoch
        and per_epoch
        and max(validations(log_file), default=0) >= until_epoch * per_epoch
    ):
        print(f"{run}: epoch {until_epoch} validated earlier", flush=True)
        return
    print(f"{run}: {shlex.join(command)}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{run}.out", "a") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            while process.poll() is None:
                time.sleep(10)
                per_epoch = per_epoch or batches_per_epoch(log_file)
                if until_epoch and per_epoch:
                    done = max(validations(log_file), default=0)
                    if done >= until_epoch * per_epoch:
                        process.send_signal(signal.SIGINT)  # checkpoints, then exits
                        process.wait()
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            process.wait()
            raise
    # 0: finished; 128 + SIGINT: stopped here after --until_epoch (checkpointed).
    if process.returncode not in (0, 128 + signal.SIGINT):
        raise SystemExit(
            f"seed_table.py: error: run {run} failed (exit {process.returncode}); "
            f"see {out / f'{run}.out'}"
        )


def run_report(run: str, out: Path) -> dict[str, Any]:
    """What one run has reached: per-epoch validation, the test figures when finished."""
    log_file = out / "logs" / run / "training.log"
    per_epoch = batches_per_epoch(log_file) or 2827
    epochs = {
        step // per_epoch: {"step": step, "exact": exact, "original": original, "weights": w}
        for step, (_, exact, original, w) in validations(log_file).items()
        if step % per_epoch == 0
    }
    results_file = out / "checkpoints" / run / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    return {
        "run": run,
        "epochs": epochs,
        "test": results.get("test"),
        "pi": results.get("pi"),
        "architecture": results.get("architecture"),
        "seconds": logged_seconds(log_file),
    }


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(reports: list[dict[str, Any]], machine: str) -> str:
    """The side-by-side table: the seed's figures, then each run's (original's, exact)."""
    last = max((max(r["epochs"], default=0) for r in reports), default=0)
    head = "| epoch | seed's table |" + "".join(
        f" {r['run']}: original's figure | {r['run']}: exact |" for r in reports
    )
    lines = [head, "|---" * (2 + 2 * len(reports)) + "|"]
    for epoch in range(1, max(last, 1) + 1):
        row = f"| {epoch} | {_cell(SEED_TABLE.get(epoch))} |"
        for r in reports:
            got = r["epochs"].get(epoch, {})
            mark = "*" if got.get("weights") else ""  # scored with other block weights
            row += f" {_cell(got.get('original'))}{mark} | {_cell(got.get('exact'))}{mark} |"
        lines.append(row)
    lines.append("")
    for r in reports:
        test = r["test"]
        if test:
            word = test.get("word_perplexity")
            lines.append(
                f"- {r['run']}: test perplexity {test['perplexity']:.2f} exact, "
                f"{test['perplexity_original']:.2f} by the original's figure, per word "
                + (
                    f"{word:.2f}"
                    if word
                    else "not defined (the original's records carry no word counts)"
                )
                + f"; architecture {r['architecture']}"
            )
        if r["seconds"]:
            lines.append(
                f"- {r['run']}: {r['seconds'] / 3600:.2f} h of wall time so far (training and "
                "validation, from training.log)"
            )
    if any(got.get("weights") for r in reports for got in r["epochs"].values()):
        lines.append(
            "- *: validated with expected block weights while the search's pi was frozen "
            "(the argmax of an unmoved pi is each block's first candidate)"
        )
    lines.append(f"- machine: {machine}")
    return "\n".join(lines) + "\n"


def spread(reports: list[dict[str, Any]]) -> dict[int, tuple[float, float]]:
    """epoch -> (mean, sample standard deviation) of the exact figure over the runs that
    reached it (at least two)."""
    table = {}
    epochs = {e for r in reports for e in r["epochs"]}
    for epoch in sorted(epochs):
        values = [r["epochs"][epoch]["exact"] for r in reports if epoch in r["epochs"]]
        if len(values) >= 2:
            mean = sum(values) / len(values)
            sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            table[epoch] = (mean, sd)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--name", default="partf", help="run name prefix (a variant's name)")
    parser.add_argument(
        "--flags", default="", help="extra partf-train flags for every run, one string"
    )
    parser.add_argument("--until_epoch", type=int, default=None, help="stop after this epoch")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "seed_table")
    parser.add_argument("--report_only", action="store_true", help="only read the logs")
    args = parser.parse_args(argv)
    if args.until_epoch is not None and not 1 <= args.until_epoch <= 20:
        parser.error(f"--until_epoch must be between 1 and 20, got {args.until_epoch}")
    try:
        require(original_dir() / "tfrecords_train", "the original project's train records")
    except SharedDataMissing as error:
        print(f"seed_table.py: error: {error}", file=sys.stderr)
        return 1
    runs = [f"{args.name}_seed{seed}" for seed in args.seeds]
    if not args.report_only:
        for run, seed in zip(runs, args.seeds, strict=True):
            train(run, seed, shlex.split(args.flags), args.out, args.until_epoch)
    reports = [run_report(run, args.out) for run in runs]
    machine = cpu_name()
    text = markdown(reports, machine)
    deviations = spread(reports)
    if deviations:
        text += "\nExact validation perplexity over the seeds (mean ± sample sd):\n\n"
        text += "".join(f"- epoch {e}: {m:.2f} ± {s:.2f}\n" for e, (m, s) in deviations.items())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"report_{args.name}.md").write_text(text)
    (args.out / f"report_{args.name}.json").write_text(
        json.dumps({"machine": machine, "runs": reports}, indent=2) + "\n"
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
