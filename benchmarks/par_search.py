"""Benchmark: the PAR search and its second stage, measured.

Every run is `partf-train` itself (`python -m partf.train`, in a subprocess) with the
base configuration of base_model.sh (d_model 128, 4 heads, d_ffn 512, 6 blocks, dropout
0.1, cutoffs 250 and 2500, Adam to 1e-4 with cosine decay, tau 1.0 to 0.1), trained on
WikiText-2 valid and scored on test (the offline stand-in), at two contexts:

* short: the original project's records (32 rows of 32 tokens, memory 16), 6,080 steps
  (20 epochs), 4,000 warm-up steps: base_model.sh's run;
* long: records of 8 rows of 256 tokens built here from the same text with the same
  tokenizer (line ends kept), memory 256, 10 epochs (1,550 steps of 2,048 tokens, half the
  short runs' tokens), 1,000 warm-up steps. Here a relative-attention block costs about
  2.3 dense blocks (0.60 against 0.26 MFLOPs per token).

Parts (`--parts`, all by default):

* search: `--search=par` for each seed (short context); per seed the architecture, the
  largest pi of each block, test perplexity with argmax and expected block weights.
* txl: only the Transformer-XL baselines of stage 2 (they need no search).
* stage2: per context and seed, the search's derived architecture (argmax of pi, identity
  blocks dropped: `partf-train --from_search`) and a Transformer-XL of the same depth and
  width ("A D A D A D") trained from scratch with the same data, steps and schedule:
  exact test perplexity (mean and spread over seeds), forward FLOPs per token (analytic,
  `partf.models.cost`), training steps/s and evaluation latency per segment.
* speed: training steps/s of the stage-2 architectures measured back to back (short
  fresh runs alternating the architectures), since the stage-2 runs themselves were
  trained at different times under different load.
* estimators: the sampled-path search (`--search_estimator=sampled`) against the
  all-candidates one: steps/s and the architecture found (short context).
* sweep: the cost-aware search at several `--search_cost_weight` values: each searched
  architecture's FLOPs per token against its test perplexity (argmax weights), a front,
  with a plot (short context by default: a long-context search takes about an hour here).
* which: candidates {relative, linear, norm, dense, identity} at the long context: which
  blocks keep softmax attention, which take a linear one; the derived model against
  Transformer-XL.

Runs are resumable: a run whose results.json exists is read, not repeated, and an
interrupted one resumes from its checkpoint (partf-train's own resume). Everything goes
under --out (default data/bench/par_search): the runs, report.md, report.json, front.png.
A whole default run takes many hours on 2 CPU cores; `--parts` and `--seeds` select.

Run: .venv/bin/python benchmarks/par_search.py [--parts search stage2 ...] [--seeds 0 1 2]
     [--contexts short long] [--cost_weights 0.1 0.3 1.0] [--out data/bench/par_search]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from shared_data import SharedDataMissing, original_dir, require, shared_data_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("par_search")

#: base_model.sh's configuration (its model and optimization flags).
BASE_FLAGS = [
    "--d_model=128",
    "--num_heads=4",
    "--d_ffn=512",
    "--num_layers=6",
    "--dropout_rate=0.1",
    "--cutoffs=250",
    "--cutoffs=2500",
    "--proj_factor=4",
    "--max_lr=1e-4",
    "--tau_start=1.0",
    "--tau_end=0.1",
    "--epochs=20",
    "--steps_per_execution=32",
]

#: Flags added to every run (--max_steps for a quick check of the script).
EXTRA_FLAGS: list[str] = []

WHICH_CANDIDATES = "relative,linear,norm,dense,identity"


def shared_data() -> Path:
    """The reference data folder (benchmarks/shared_data.py), or a one-line exit."""
    try:
        require(original_dir(), "the original project's records and tokenizer")
        require(shared_data_dir() / "wikitext-2" / "test.txt", "WikiText-2 test text")
    except SharedDataMissing as missing:
        raise SystemExit(f"par_search.py: error: {missing}") from None
    return shared_data_dir()


@dataclasses.dataclass(frozen=True)
class Context:
    """Records and the context-dependent flags of one segment length."""

    name: str
    train: Path
    test: Path
    tokenizer_prefix: Path
    flags: tuple[str, ...]


def contexts(data: Path, out: Path) -> dict[str, Context]:
    original = data / "par-transformer-xl-original"
    tokenizer = original / "tokenizer" / "wiki2_12k"
    long_prefix = out / "records" / "wt2_bsz8_seqlen256"
    return {
        "short": Context(
            "short",
            original / "tfrecords_valid",
            original / "tfrecords_test",
            tokenizer,
            ("--mem_len=16", "--warmup_steps=4000"),
        ),
        "long": Context(
            "long",
            Path(f"{long_prefix}_valid"),
            Path(f"{long_prefix}_test"),
            tokenizer,
            # 10 epochs (1,550 steps of 2,048 tokens, half the short runs' tokens) keep a
            # long-context run under an hour on 2 CPU cores; the warm-up scales with it.
            ("--mem_len=256", "--warmup_steps=1000", "--epochs=10"),
        ),
    }


def build_long_records(data: Path, context: Context) -> None:
    """8 x 256 records of WikiText-2 valid and test with the original tokenizer."""
    for split, folder in (("valid", context.train), ("test", context.test)):
        if (folder / "metadata.json").is_file():
            continue
        folder.parent.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "partf.cli.build_data",
            f"--text_file={data / 'wikitext-2' / f'{split}.txt'}",
            f"--tfrecords_directory={folder}",
            f"--sp_model_prefix={context.tokenizer_prefix}",
            "--batch_size=8",
            "--seq_len=256",
        ]
        subprocess.run(command, check=True, cwd=ROOT)


# ------------------------------------------------------------------ runs
def run_folder(out: Path, name: str) -> Path:
    return out / "runs" / "checkpoints" / name


def train(out: Path, context: Context, name: str, flags: list[str]) -> dict[str, Any]:
    """One partf-train run (skipped when its results.json exists); its results."""
    results_file = run_folder(out, name) / "results.json"
    if not results_file.is_file():
        command = [
            sys.executable,
            "-m",
            "partf.train",
            f"--train_directory={context.train}",
            "--valid_directory=",
            f"--test_directory={context.test}",
            f"--sp_model_prefix={context.tokenizer_prefix}",
            *BASE_FLAGS,
            *context.flags,
            f"--model_name={name}",
            f"--output_dir={out / 'runs'}",
            *flags,
            *EXTRA_FLAGS,
        ]
        log.info("training %s: %s", name, " ".join(flags))
        started = time.perf_counter()
        with open(out / "runs" / f"{name}.out", "w") as stream:
            done = subprocess.run(command, cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise SystemExit(f"par_search.py: error: run {name} failed; see {stream.name}")
        log.info("%s done in %.0f s", name, time.perf_counter() - started)
    return json.loads(results_file.read_text())


def steps_per_second(out: Path, name: str, tokens_per_step: int) -> float:
    """Median training speed of a run, from the tok/s of its training.log lines (each
    measured between two log records, compilation excluded)."""
    rates = []
    for line in (out / "runs" / "logs" / name / "training.log").read_text().splitlines():
        if " tok/s" in line:
            rates.append(float(line.rsplit(" ", 2)[-2].replace(",", "")) / tokens_per_step)
    return statistics.median(rates) if rates else math.nan


def rescore(out: Path, name: str, test: Path, modes: tuple[str, ...]) -> dict[str, float]:
    """Exact test perplexity of a saved run under each block-weight mode."""
    import keras

    import partf.models  # noqa: F401 (registers the classes)
    from partf.generation import reconfigure
    from partf.training.perplexity import Evaluator, perplexity_report
    from partf.training.splits import load_split

    split = load_split(str(test), "test")
    model = keras.saving.load_model(run_folder(out, name) / f"{name}.keras", compile=False)
    scores = {}
    for mode in modes:
        scored = reconfigure(model, eval_mode=mode)
        scores[mode] = perplexity_report(Evaluator(scored).evaluate(split.dataset))["perplexity"]
    return scores


def latency_ms(out: Path, name: str, test: Path, repeats: int = 20) -> float:
    """Median time of one compiled evaluation call on one segment of the test records
    (the model's batch, with memory), in milliseconds."""
    import keras
    import numpy as np
    import tensorflow as tf

    import partf.models  # noqa: F401
    from partf.data import load_tfrecords

    model = keras.saving.load_model(run_folder(out, name) / f"{name}.keras", compile=False)
    inputs, _ = next(iter(load_tfrecords(test)))
    step = tf.function(lambda x: model(x, training=False), jit_compile=True)
    step(inputs).numpy()  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.asarray(step(inputs))
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def derived(results: dict[str, Any]) -> str:
    from partf.training.search import searched_architecture

    return searched_architecture(results["pi"], results["candidates"])


def transformer_xl(num_blocks: int) -> str:
    return " ".join("A" if i % 2 == 0 else "D" for i in range(num_blocks))


# ----------------------------------------------------------------- parts
def part_txl(out, ctx, seeds, names):
    """The Transformer-XL baselines alone (they need no search): stage 2 reads them."""
    for context_name in names:
        for seed in seeds:
            arch = transformer_xl(6)
            flags = [f"--architecture={arch}", "--num_layers=6", f"--seed={seed}"]
            train(out, ctx[context_name], f"{context_name}_txl_s{seed}", flags)


def part_search(out, ctx, seeds, report):
    rows = []
    for seed in seeds:
        name = f"short_search_s{seed}"
        res = train(out, ctx["short"], name, ["--search=par", f"--seed={seed}"])
        scores = rescore(out, name, ctx["short"].test, ("argmax", "expected"))
        rows.append(
            {
                "seed": seed,
                "architecture": res["architecture"],
                "max_pi": [round(max(p), 3) for p in res["pi"]],
                "argmax": scores["argmax"],
                "expected": scores["expected"],
                "gap_percent": 100 * (scores["argmax"] / scores["expected"] - 1),
            }
        )
    report["search"] = rows


def part_stage2(out, ctx, seeds, names, report, long_from_short=False):
    """Derived architecture against Transformer-XL, per context and seed. With
    `long_from_short` the long context trains the architecture searched at the short
    context (a search at 256 tokens takes about an hour on 2 CPU cores)."""
    rows = []
    for context_name in names:
        context = ctx[context_name]
        tokens = 32 * 32 if context_name == "short" else 8 * 256
        searched_at = "short" if long_from_short else context_name
        for seed in seeds:
            search = f"{searched_at}_search_s{seed}"
            res = train(out, ctx[searched_at], search, ["--search=par", f"--seed={seed}"])
            architecture = derived(res)
            blocks = len(res["pi"])
            derived_label = "derived" if searched_at == context_name else "fromshort"
            for label, arch in ((derived_label, architecture), ("txl", transformer_xl(blocks))):
                name = f"{context_name}_{label}_s{seed}"
                fixed = train(
                    out,
                    context,
                    name,
                    [
                        f"--architecture={arch}",
                        f"--num_layers={len(arch.split())}",
                        f"--seed={seed}",
                    ],
                )
                rows.append(
                    {
                        "context": context_name,
                        "seed": seed,
                        "model": {
                            "derived": "PAR, searched",
                            "fromshort": "PAR, searched at the short context",
                            "txl": "Transformer-XL",
                        }[label],
                        "architecture": arch,
                        "perplexity": fixed["test"]["perplexity"],
                        "flops_blocks": fixed["flops_per_token"]["blocks"],
                        "flops_total": fixed["flops_per_token"]["total"],
                        "steps_per_second": steps_per_second(out, name, tokens),
                        "latency_ms": latency_ms(out, name, context.test),
                    }
                )
    report["stage2"] = rows


def part_speed(out, ctx, report, repeats=2):
    """Training steps/s of every stage-2 architecture measured back to back: short fresh
    runs, alternating the architectures, so the machine's load is shared alike (the
    stage-2 runs themselves were trained hours apart, some in another session)."""
    rows = []
    for context_name in sorted({r["context"] for r in report.get("stage2", [])}):
        context = ctx[context_name]
        tokens, steps = (32 * 32, 384) if context_name == "short" else (8 * 256, 192)
        stage2 = [r for r in report["stage2"] if r["context"] == context_name]
        archs = sorted({r["architecture"] for r in stage2})
        rates: dict[str, list[float]] = {a: [] for a in archs}
        for repeat in range(repeats):
            for arch in archs:
                slug = arch.replace(" ", "")
                name = f"speed_{context_name}_{slug}_r{repeat}"
                flags = [
                    f"--architecture={arch}",
                    f"--num_layers={len(arch.split())}",
                    f"--max_steps={steps}",
                    "--log_every=32",
                    "--seed=0",
                ]
                train(out, context, name, flags)
                rates[arch].append(steps_per_second(out, name, tokens))
        for arch in archs:
            rows.append(
                {
                    "context": context_name,
                    "architecture": arch,
                    "steps_per_second": statistics.median(rates[arch]),
                    "runs": rates[arch],
                }
            )
    report["speed"] = rows


def part_estimators(out, ctx, seeds, report, repeats=2):
    """The sampled-path search against the all-candidates one: the architecture each
    finds (full runs; the sampled one without XLA, which TensorFlow cannot compile for
    it at this size) and training steps/s measured back to back in short fresh runs,
    both without XLA (like for like) and the mixture with XLA (its default)."""
    rows = []
    variants = {
        "mixture": ["--search=par"],
        "sampled": ["--search=par", "--search_estimator=sampled", "--jit_compile=False"],
    }
    for seed in seeds:
        for estimator, flags in variants.items():
            name = f"short_search_s{seed}" if estimator == "mixture" else f"short_sampled_s{seed}"
            res = train(out, ctx["short"], name, [*flags, f"--seed={seed}"])
            scores = rescore(out, name, ctx["short"].test, ("argmax",))
            rows.append(
                {
                    "seed": seed,
                    "estimator": estimator,
                    "architecture": res["architecture"],
                    "max_pi": [round(max(p), 3) for p in res["pi"]],
                    "argmax": scores["argmax"],
                    "wall_seconds": res["wall_time_seconds"],
                }
            )
    speeds: dict[str, list[float]] = {}
    paired = {
        "mixture, XLA": ["--search=par"],
        "mixture, no XLA": ["--search=par", "--jit_compile=False"],
        "sampled, no XLA": ["--search=par", "--search_estimator=sampled", "--jit_compile=False"],
    }
    for repeat in range(repeats):
        for label, flags in paired.items():
            slug = label.replace(", ", "_").replace(" ", "")
            name = f"speed_estimator_{slug}_r{repeat}"
            train(out, ctx["short"], name, [*flags, "--max_steps=192", "--log_every=32"])
            speeds.setdefault(label, []).append(steps_per_second(out, name, 32 * 32))
    report["estimators"] = {"runs": rows, "speed": speeds}


def part_sweep(out, ctx, seeds, weights, context_name, report):
    rows = []
    context = ctx[context_name]
    for seed in seeds[:1]:
        for weight in (0.0, *weights):
            name = (
                f"{context_name}_search_s{seed}"
                if weight == 0
                else (f"{context_name}_cost{weight:g}_s{seed}")
            )
            flags = ["--search=par", f"--seed={seed}"]
            if weight:
                flags.append(f"--search_cost_weight={weight:g}")
            res = train(out, context, name, flags)
            scores = rescore(out, name, context.test, ("argmax",))
            rows.append(
                {
                    "context": context_name,
                    "cost_weight": weight,
                    "architecture": res["architecture"],
                    "argmax": scores["argmax"],
                    "flops_blocks": res["flops_per_token"]["blocks"],
                    "flops_total": res["flops_per_token"]["total"],
                }
            )
    report["sweep"] = rows


def part_which(out, ctx, seeds, report, context_name="long"):
    rows = []
    context = ctx[context_name]
    tokens = 32 * 32 if context_name == "short" else 8 * 256
    for seed in seeds[:1]:
        name = f"{context_name}_which_s{seed}"
        res = train(
            out,
            context,
            name,
            ["--search=par", f"--seed={seed}", f"--candidates={WHICH_CANDIDATES}"],
        )
        architecture = derived(res)
        fixed_name = f"{context_name}_which_derived_s{seed}"
        fixed = train(
            out,
            context,
            fixed_name,
            [
                f"--architecture={architecture}",
                f"--num_layers={len(architecture.split())}",
                f"--seed={seed}",
            ],
        )
        rows.append(
            {
                "context": context_name,
                "seed": seed,
                "search_architecture": res["architecture"],
                "pi": [[round(p, 3) for p in row] for row in res["pi"]],
                "candidates": res["candidates"],
                "derived": architecture,
                "perplexity": fixed["test"]["perplexity"],
                "flops_blocks": fixed["flops_per_token"]["blocks"],
                "flops_total": fixed["flops_per_token"]["total"],
                "steps_per_second": steps_per_second(out, fixed_name, tokens),
                "latency_ms": latency_ms(out, fixed_name, context.test),
            }
        )
    report["which"] = rows


# ---------------------------------------------------------------- report
def markdown(report: dict[str, Any]) -> str:
    lines = []
    if report.get("search"):
        lines += [
            "| seed | architecture | largest pi per block | test ppl, argmax | expected | gap |",
            "|---:|---|---|---:|---:|---:|",
        ]
        for r in report["search"]:
            pis = " ".join(f"{p:.2f}" for p in r["max_pi"])
            lines.append(
                f"| {r['seed']} | {r['architecture']} | {pis} | {r['argmax']:.2f} | "
                f"{r['expected']:.2f} | {r['gap_percent']:+.2f}% |"
            )
        lines.append("")
    if report.get("stage2"):
        lines += [
            "| context | model | blocks | test ppl (mean ± spread) | MFLOPs/token blocks "
            "(total) | train steps/s | eval ms/segment |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in report["stage2"]:
            groups.setdefault((r["context"], r["model"]), []).append(r)
        for (context, model), rows in groups.items():
            ppl = [r["perplexity"] for r in rows]
            spread = (max(ppl) - min(ppl)) / 2 if len(ppl) > 1 else 0.0
            archs = ", ".join(sorted({r["architecture"] for r in rows}))
            lines.append(
                f"| {context} | {model} | {archs} | {statistics.mean(ppl):.2f} ± {spread:.2f} | "
                f"{statistics.mean(r['flops_blocks'] for r in rows) / 1e6:.2f} "
                f"({statistics.mean(r['flops_total'] for r in rows) / 1e6:.2f}) | "
                f"{statistics.mean(r['steps_per_second'] for r in rows):.2f} | "
                f"{statistics.mean(r['latency_ms'] for r in rows):.1f} |"
            )
        lines.append("")
    if report.get("speed"):
        lines += [
            "| context | blocks | train steps/s, back to back (median of runs) |",
            "|---|---|---:|",
        ]
        for r in report["speed"]:
            runs = ", ".join(f"{v:.2f}" for v in r["runs"])
            lines.append(
                f"| {r['context']} | {r['architecture']} | {r['steps_per_second']:.2f} ({runs}) |"
            )
        lines.append("")
    if report.get("estimators"):
        lines += [
            "| seed | estimator | architecture | largest pi per block | test ppl, argmax | "
            "wall s |",
            "|---:|---|---|---|---:|---:|",
        ]
        for r in report["estimators"]["runs"]:
            pis = " ".join(f"{p:.2f}" for p in r["max_pi"])
            lines.append(
                f"| {r['seed']} | {r['estimator']} | {r['architecture']} | {pis} | "
                f"{r['argmax']:.2f} | {r['wall_seconds']:.0f} |"
            )
        lines += ["", "| search | train steps/s, back to back (median of runs) |", "|---|---:|"]
        for label, rates in report["estimators"]["speed"].items():
            runs = ", ".join(f"{v:.2f}" for v in rates)
            lines.append(f"| {label} | {statistics.median(rates):.2f} ({runs}) |")
        lines.append("")
    if report.get("sweep"):
        lines += [
            "| context | cost weight (per MFLOP) | architecture | test ppl, argmax | "
            "MFLOPs/token blocks (total) |",
            "|---|---:|---|---:|---:|",
        ]
        for r in report["sweep"]:
            blocks, total = r["flops_blocks"] / 1e6, r["flops_total"] / 1e6
            lines.append(
                f"| {r['context']} | {r['cost_weight']:g} | {r['architecture']} | "
                f"{r['argmax']:.2f} | {blocks:.2f} ({total:.2f}) |"
            )
        lines.append("")
    if report.get("which"):
        for r in report["which"]:
            lines.append(f"which attention (seed {r['seed']}): candidates {r['candidates']}")
            lines.append(f"search: {r['search_architecture']}; pi {r['pi']}")
            lines.append(
                f"derived {r['derived']}: test ppl {r['perplexity']:.2f}, "
                f"{r['flops_blocks'] / 1e6:.2f} ({r['flops_total'] / 1e6:.2f}) MFLOPs/token, "
                f"{r['steps_per_second']:.2f} steps/s, {r['latency_ms']:.1f} ms/segment"
            )
        lines.append("")
    return "\n".join(lines)


def plot_front(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report.get("sweep") or []
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["flops_blocks"] / 1e6 for r in rows], [r["argmax"] for r in rows], "o-")
    for r in rows:
        ax.annotate(
            f"λ={r['cost_weight']:g}\n{r['architecture']}",
            (r["flops_blocks"] / 1e6, r["argmax"]),
            fontsize=7,
        )
    ax.set_xlabel("forward MFLOPs per token (blocks)")
    ax.set_ylabel("test perplexity (argmax)")
    ax.set_title(f"cost-aware PAR search, {rows[0]['context']} context")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["search", "stage2", "speed", "estimators", "sweep", "which"],
        choices=["txl", "search", "stage2", "speed", "estimators", "sweep", "which"],
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--contexts", nargs="+", default=["short", "long"])
    parser.add_argument("--cost_weights", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    parser.add_argument("--which_context", default="long", choices=["short", "long"])
    parser.add_argument("--sweep_context", default="short", choices=["short", "long"])
    parser.add_argument(
        "--long_from_short",
        action="store_true",
        help="stage 2 at the long context trains the short context's searched architecture",
    )
    parser.add_argument("--out", default=str(ROOT / "data" / "bench" / "par_search"))
    parser.add_argument(
        "--max_steps", type=int, default=None, help="cut every run short (checks the script)"
    )
    args = parser.parse_args()
    if args.max_steps:
        EXTRA_FLAGS.append(f"--max_steps={args.max_steps}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    data = shared_data()
    ctx = contexts(data, out)
    if "long" in args.contexts or {"sweep", "which"} & set(args.parts):
        build_long_records(data, ctx["long"])
    report_file = out / "report.json"
    report = json.loads(report_file.read_text()) if report_file.is_file() else {}
    if "txl" in args.parts:
        part_txl(out, ctx, args.seeds[:2], args.contexts)
    if "search" in args.parts:
        part_search(out, ctx, args.seeds, report)
    if "stage2" in args.parts:
        part_stage2(out, ctx, args.seeds[:2], args.contexts, report, args.long_from_short)
    if "speed" in args.parts:
        part_speed(out, ctx, report)
    if "estimators" in args.parts:
        part_estimators(out, ctx, args.seeds[:1], report)
    if "which" in args.parts:
        part_which(out, ctx, args.seeds, report, args.which_context)
    if "sweep" in args.parts:
        part_sweep(out, ctx, args.seeds, args.cost_weights, args.sweep_context, report)
    report_file.write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (out / "report.md").write_text(text)
    plot_front(report, out / "front.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
