"""Benchmark: forward + backward time and peak memory of every attention, 256 to 16,384 tokens.

Each mechanism runs one training step (forward, backward to its weights and
input) on a batch holding a fixed number of tokens, so batch * length is the
same at every length: a linear-cost mechanism keeps its time per token flat,
a quadratic one grows with the length. Every (mechanism, length) pair runs in
a fresh process so that its peak memory (resident set on CPU, allocator peak
on GPU) is its own.

Writes `attention_efficiency.md` (tables of time per token and peak memory,
the length at which each mechanism overtakes softmax, and the targets),
`attention_efficiency.png` (log-log plot) and `attention_efficiency.json` to
--out_dir. Targets on a 2-core CPU: each linear mechanism's time per token
within 1.5x from 1k to 16k tokens, and at 8k at least 5x faster than relative
(Transformer-XL) softmax attention.

Run: .venv/bin/python benchmarks/attention_efficiency.py [--lengths 256 1024 4096]
     [--mechanisms linear performer softmax] [--device gpu]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = [256, 512, 1024, 2048, 4096, 8192, 16384]
MECHANISMS = [
    "relative",
    "softmax",
    "local",
    "diag",
    "eva",
    "linear",
    "performer",
    "fastformer",
    "norm",
    "primal",
]
# Cost grows with the length squared: these are skipped when their score
# tensors would not fit in --max_quadratic_gb.
QUADRATIC = {"relative", "softmax"}
# Whose time per token must stay flat (target 1) and beat relative (target 2).
LINEAR = ["linear", "performer", "fastformer", "norm", "primal", "local", "diag", "eva"]

COMMAND = [".venv/bin/python", "benchmarks/attention_efficiency.py"]

log = logging.getLogger("attention_efficiency")


# ---------------------------------------------------------------------- worker
def measure(args: argparse.Namespace) -> dict:
    """One (mechanism, length) pair in this process: median step time and peak memory."""
    import numpy as np
    import tensorflow as tf

    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    from partf.attention import create_attention

    length = args.length
    batch = max(1, args.tokens // length)
    layer = create_attention(args.mechanism, args.d_model, args.num_heads, causal=True)
    x = tf.constant(
        np.random.default_rng(0).normal(size=(batch, length, args.d_model)).astype("float32")
    )
    layer(x[:, :8])  # build the weights outside the timed step

    @tf.function(jit_compile=args.jit)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, _ = layer(x, training=True)
            loss = tf.reduce_mean(tf.square(tf.cast(y, tf.float32))) + sum(layer.losses)
        return tape.gradient(loss, [x] + layer.trainable_weights)

    gpu = args.device == "gpu"
    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    rss_before = _rss_mb()
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), step(x))  # trace (and compile)
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), step(x))
        times.append(time.perf_counter() - start)
    if gpu:
        peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    else:
        peak = _peak_rss_mb() - rss_before
    seconds = statistics.median(times)
    return {
        "mechanism": args.mechanism,
        "length": length,
        "batch": batch,
        "seconds": seconds,
        "us_per_token": seconds / (batch * length) * 1e6,
        "first_seconds": first,
        "peak_mb": peak,
    }


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


# ---------------------------------------------------------------------- driver
def quadratic_gb(args: argparse.Namespace, length: int) -> float:
    """Size of one [B, H, T, T] float32 score tensor, in GB."""
    batch = max(1, args.tokens // length)
    return batch * args.num_heads * length * length * 4 / 1e9


def run_pair(args: argparse.Namespace, mechanism: str, length: int) -> dict:
    if mechanism in QUADRATIC and quadratic_gb(args, length) * 6 > args.max_quadratic_gb:
        return {"mechanism": mechanism, "length": length, "skipped": "memory"}
    command = [
        sys.executable,
        __file__,
        "--worker",
        f"--mechanism={mechanism}",
        f"--length={length}",
        f"--tokens={args.tokens}",
        f"--d_model={args.d_model}",
        f"--num_heads={args.num_heads}",
        f"--repeats={args.repeats}",
        f"--device={args.device}",
    ] + (["--jit"] if args.jit else [])
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=args.timeout)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["?"]
        log.warning("%s at %d failed: %s", mechanism, length, tail[0])
        return {"mechanism": mechanism, "length": length, "skipped": "error: " + tail[0][:80]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def available(mechanism: str) -> bool:
    from partf.attention import get_attention_class

    try:
        get_attention_class(mechanism)
    except (ValueError, ImportError) as error:
        log.warning("skipping %s: %s", mechanism, error)
        return False
    return True


def crossover(results: dict, mechanism: str, baseline: str) -> int | None:
    """Smallest length from which `mechanism` is faster than `baseline` at every measured length."""
    lengths = sorted(n for n in results[mechanism] if "seconds" in results[mechanism][n])
    found = None
    for n in reversed(lengths):
        base = results.get(baseline, {}).get(n, {})
        if "seconds" not in base:
            continue  # baseline skipped: it cannot be faster there
        if results[mechanism][n]["seconds"] < base["seconds"]:
            found = n
        else:
            break
    return found


def report(args: argparse.Namespace, results: dict) -> str:
    mechanisms = list(results)
    lengths = args.lengths
    lines = [
        "# Attention efficiency",
        "",
        f"One training step (forward + backward) on {args.tokens} tokens per batch "
        f"(batch = {args.tokens} / length), d_model {args.d_model}, {args.num_heads} heads, "
        f"default options of each mechanism, device {args.device}"
        f"{' (XLA)' if args.jit else ''}; median of {args.repeats} steps.",
        "",
        f"Command: `{' '.join(COMMAND + args.argv)}`",
        "",
        "## Time per token (microseconds)",
        "",
        "| mechanism | " + " | ".join(str(n) for n in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
    ]

    def cell(entry: dict, key: str, fmt: str) -> str:
        if "skipped" in entry:
            return "skip" if entry["skipped"] == "memory" else "error"
        return format(entry[key], fmt)

    for m in mechanisms:
        row = [cell(results[m].get(n, {"skipped": "-"}), "us_per_token", ".2f") for n in lengths]
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    lines += [
        "",
        "## Peak memory of the step (MB)",
        "",
        "| mechanism | " + " | ".join(str(n) for n in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
    ]
    for m in mechanisms:
        row = [cell(results[m].get(n, {"skipped": "-"}), "peak_mb", ".0f") for n in lengths]
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    lines += ["", "`skip`: score tensors over --max_quadratic_gb; not run.", ""]

    baseline = "relative" if "relative" in results else "softmax"
    lines += [
        "## Targets",
        "",
        f"| mechanism | overtakes softmax at | time/token 16k / 1k | max / min over 1k-16k "
        f"| speed-up over {baseline} at 8k |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in mechanisms:
        if m in QUADRATIC:
            continue
        over = crossover(results, m, "softmax") if "softmax" in results else None
        flat = [
            results[m][n]["us_per_token"]
            for n in lengths
            if 1024 <= n <= 16384 and "us_per_token" in results[m].get(n, {})
        ]
        spread = f"{max(flat) / min(flat):.2f}" if len(flat) > 1 else "-"
        ends = [results[m].get(n, {}).get("us_per_token") for n in (1024, 16384)]
        trend = f"{ends[1] / ends[0]:.2f}" if None not in ends else "-"
        base = results.get(baseline, {}).get(8192, {})
        mine = results[m].get(8192, {})
        speedup = (
            f"{base['seconds'] / mine['seconds']:.1f}x"
            if "seconds" in base and "seconds" in mine
            else "-"
        )
        lines.append(f"| {m} | {over or '-'} | {trend} | {spread} | {speedup} |")
    lines += [
        "",
        f"Targets: time per token within 1.5x from 1k to 16k; speed-up >= 5x over {baseline} "
        "at 8k. On a shared machine the max / min column also measures the noise between runs.",
        "",
    ]
    if args.previous:
        lines += [f"Pairs not run by this command come from `{args.previous}`.", ""]
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(12, 5))
    for m, entries in results.items():
        points = sorted((n, e) for n, e in entries.items() if "seconds" in e)
        if not points:
            continue
        style = "--" if m in QUADRATIC else "-"
        ns = [n for n, _ in points]
        ax_time.plot(ns, [e["us_per_token"] for _, e in points], style, marker="o", label=m)
        ax_mem.plot(ns, [max(e["peak_mb"], 1.0) for _, e in points], style, marker="o", label=m)
    for ax, title in ((ax_time, "time per token (us)"), (ax_mem, "peak memory (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens per batch fixed)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    ax_time.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanisms", nargs="+", default=MECHANISMS)
    parser.add_argument("--lengths", nargs="+", type=int, default=LENGTHS)
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per batch")
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--num_heads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed steps after the first")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--jit", action="store_true", help="XLA-compile the step")
    parser.add_argument(
        "--max_quadratic_gb", type=float, default=10.0, help="skip quadratic runs above this"
    )
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run")
    parser.add_argument("--out_dir", type=Path, default=ROOT / "results" / "benchmarks")
    parser.add_argument(
        "--previous", type=Path, help="an earlier attention_efficiency.json: keep its other pairs"
    )
    # Worker mode: one measurement, printed as JSON.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mechanism", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    if args.worker:
        print(json.dumps(measure(args)))
        return 0

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    mechanisms = [m for m in args.mechanisms if available(m)]
    results: dict[str, dict[int, dict]] = {}
    if args.previous:
        for m, entries in json.loads(args.previous.read_text()).items():
            results[m] = {int(n): entry for n, entry in entries.items()}
    for m in mechanisms:
        results.setdefault(m, {})
    for length in args.lengths:
        for m in mechanisms:
            entry = run_pair(args, m, length)
            results[m][length] = entry
            if "seconds" in entry:
                log.info(
                    "%-10s %6d tokens: %8.3f s/step  %7.2f us/token  %7.0f MB",
                    m,
                    length,
                    entry["seconds"],
                    entry["us_per_token"],
                    entry["peak_mb"],
                )
            else:
                log.info("%-10s %6d tokens: skipped (%s)", m, length, entry["skipped"])
    # The tables cover every length measured now or kept from --previous.
    args.lengths = sorted({n for entries in results.values() for n in entries})
    args.out_dir.mkdir(parents=True, exist_ok=True)
    table = report(args, results)
    (args.out_dir / "attention_efficiency.md").write_text(table)
    (args.out_dir / "attention_efficiency.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out_dir / "attention_efficiency.png")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
