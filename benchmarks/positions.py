"""Benchmark: test perplexity of each attention with and without position information.

Every mechanism is trained in the same plain stack (`--architecture plain`: attention,
dense, attention, dense, ...) at the same width and depth, for the same number of steps
with the same schedule and seed, once without positions (`--position none`) and once
with each position encoding it takes (sinusoidal, rotary where it is defined, learned
for the mechanisms without rotary); relative attention keeps its own relative encoding.
Each run is `python -m partf.train` in its own process (the command line users run),
trained on WikiText-2 valid and scored on WikiText-2 test by the trainer's evaluator
(memory starting empty, exact token perplexity).

Writes <out>/positions.json (every run) and prints a Markdown table: per mechanism the
perplexity without positions, with each option tried, and the best option.

These are short runs on a busy 2-core CPU: they rank encodings after a few hundred
steps, not converged models. A run takes 1 to 3 minutes.

By default the records are built (once, under <out>/records) from the reference
data's WikiText-2 valid and test text with the original project's tokenizer, found
through benchmarks/shared_data.py; --train, --test and --sp_model name others.

Run:
    nice -n 10 .venv/bin/python benchmarks/positions.py --steps 300 [--out runs/positions]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_data import SharedDataMissing, original_dir, require, shared_data_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: Mechanism -> the position encodings tried besides "none".
OPTIONS = {
    "relative": [],
    "softmax": ["sinusoidal", "rotary"],
    "local": ["sinusoidal", "rotary"],
    "diag": ["sinusoidal", "rotary"],
    "linear": ["sinusoidal", "rotary"],
    "norm": ["sinusoidal", "rotary"],
    "performer": ["sinusoidal", "rotary"],
    "eva": ["sinusoidal", "rotary"],
    "fastformer": ["sinusoidal", "learned"],
    "primal": ["sinusoidal", "learned"],
}


def default_records(out: Path) -> tuple[Path, Path, Path]:
    """32 x 32 records of WikiText-2 valid and test with the original tokenizer, built
    under <out>/records when missing; (train, test, tokenizer prefix)."""
    tokenizer = original_dir() / "tokenizer" / "wiki2_12k"
    text = shared_data_dir() / "wikitext-2"
    try:
        require(tokenizer.with_suffix(".model"), "the original project's tokenizer")
        require(text / "test.txt", "WikiText-2 test text")
    except SharedDataMissing as missing:
        raise SystemExit(f"positions.py: error: {missing}") from None
    folders = {}
    for split in ("valid", "test"):
        folder = out / "records" / f"wt2_bsz32_seqlen32_{split}"
        folders[split] = folder
        if (folder / "metadata.json").is_file():
            continue
        command = [
            sys.executable,
            "-m",
            "partf.cli.build_data",
            f"--text_file={text / f'{split}.txt'}",
            f"--tfrecords_directory={folder}",
            f"--sp_model_prefix={tokenizer}",
            "--batch_size=32",
            "--seq_len=32",
        ]
        subprocess.run(command, check=True, cwd=ROOT)
    return folders["valid"], folders["test"], tokenizer


def run_one(args: argparse.Namespace, mechanism: str, position: str, out: Path) -> dict:
    """Trains and scores one model in a subprocess; its results.json figures."""
    name = f"{mechanism}-{position}"
    results = out / "checkpoints" / name / "results.json"
    if results.is_file() and not args.rerun:
        return json.loads(results.read_text())
    command = [
        sys.executable,
        "-m",
        "partf.train",
        f"--train_directory={args.train}",
        "--valid_directory=",
        f"--test_directory={args.test}",
        f"--sp_model_prefix={args.sp_model}",
        f"--model_name={name}",
        f"--output_dir={out}",
        f"--attention={mechanism}",
        "--architecture=plain",
        f"--num_layers={args.num_layers}",
        f"--d_model={args.d_model}",
        f"--num_heads={args.num_heads}",
        f"--d_ffn={args.d_ffn}",
        f"--mem_len={args.mem_len}",
        f"--position={position}",
        f"--max_steps={args.steps}",
        "--epochs=100",
        f"--max_lr={args.max_lr}",
        f"--warmup_steps={args.warmup_steps}",
        f"--seed={args.seed}",
        "--plot_every=100000",
        "--keep_checkpoints=1",
        "--overwrite",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    report = json.loads(results.read_text())
    report["wall_seconds"] = time.perf_counter() - started
    results.write_text(json.dumps(report, indent=2))
    return report


def test_figures(report: dict) -> dict:
    """The test split's figures in a results.json."""
    return report.get("test") or report.get("results", {}).get("test") or {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", help="training records (default: built, see above)")
    parser.add_argument("--test", help="test records (default: built, see above)")
    parser.add_argument("--sp_model", help="tokenizer prefix (checked against the records)")
    parser.add_argument("--out", default="runs/positions", help="output folder of the runs")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--max_lr", type=float, default=1e-3)
    parser.add_argument("--warmup_steps", type=int, default=30)
    parser.add_argument("--num_layers", type=int, default=4)
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--d_ffn", type=int, default=512)
    parser.add_argument("--mem_len", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mechanisms", nargs="*", default=list(OPTIONS))
    parser.add_argument("--rerun", action="store_true", help="retrain runs already done")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not (args.train and args.test and args.sp_model):
        train, test, tokenizer = default_records(out)
        args.train = args.train or str(train)
        args.test = args.test or str(test)
        args.sp_model = args.sp_model or str(tokenizer)

    rows = {}
    for mechanism in args.mechanisms:
        rows[mechanism] = {}
        for position in ["none", *OPTIONS[mechanism]]:
            report = run_one(args, mechanism, position, out)
            figures = test_figures(report)
            rows[mechanism][position] = {
                "perplexity": figures.get("perplexity"),
                "word_perplexity": figures.get("word_perplexity"),
                "wall_seconds": report.get("wall_seconds"),
            }
            print(
                f"{mechanism:10s} {position:10s} test perplexity "
                f"{figures.get('perplexity', float('nan')):8.2f}",
                flush=True,
            )
    summary = {"settings": vars(args), "runs": rows}
    (out / "positions.json").write_text(json.dumps(summary, indent=2))

    print()
    print("| mechanism | none | sinusoidal | rotary | learned | best | change |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for mechanism, runs in rows.items():
        cells = []
        for position in ("none", "sinusoidal", "rotary", "learned"):
            value = runs.get(position, {}).get("perplexity")
            cells.append(f"{value:.1f}" if value is not None else "")
        tried = {p: r["perplexity"] for p, r in runs.items() if r["perplexity"] is not None}
        best = min(tried, key=tried.get) if tried else ""
        change = ""
        if best and best != "none" and "none" in tried:
            change = f"{100.0 * (tried[best] / tried['none'] - 1.0):+.1f}%"
        label = "own (relative)" if mechanism == "relative" else best
        print(f"| {mechanism} | {' | '.join(cells)} | {label} | {change} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
