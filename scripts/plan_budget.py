"""A plan's budget, measured before it starts: one short run of each size, then the
whole plan's time estimated from them.

    python scripts/plan_budget.py studies/recall_mqar.toml --out /tmp/budget --steps 150

Arms of one size (the same mechanisms at the same places, searched or not, trained from
scratch or converted) share one timing run: seed 0 of the first such arm, with the plan's
flags, `--max_steps=STEPS`, one at a time. Each run gives its training rate (the median
of its logged tokens per second) and what it spends besides training steps (compiling,
a search's cost measurement, a selection's scoring, validation, test, saving), its wall
time less STEPS steps at that rate. A run of the plan is then estimated as that overhead
plus its own steps at its size's rate: its --max_steps, else its --epochs times the
batches of an epoch its timing run reported (a mixed stream's batches included). A stage
2's architecture is known only once its search ends, so it is priced at the slowest size
of its search's candidates (an upper bound). Prints one line per size and the time of
one seed and of all seeds, with the machine it ran on. The timings are kept in
OUT/timings.json; a second call with the same --out and --steps estimates from them
without training again.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from partf.study.data import prepare_data
from partf.study.paths import StudyPaths
from partf.study.plan import Run, load_plan
from partf.study.records import event_scalars
from partf.study.runner import machine_name, run_environment, train_args


def flag(flags: tuple[str, ...], name: str) -> str | None:
    """The last value of `--name=value` in `flags` (the one partf-train keeps), or None."""
    found = None
    for part in flags:
        if part.startswith(f"--{name}="):
            found = part.split("=", 1)[1]
    return found


def size_of(run: Run) -> str:
    """What a run's step costs: its architecture, searched or not, converted or not."""
    # The mechanisms as a multiset: a step costs the same wherever each block stands.
    arch = " ".join(sorted(" ".join(shlex.split(flag(run.flags, "architecture") or "")).split()))
    arch = arch or "default"
    drop = flag(run.flags, "drop_attention")
    search = " search" if flag(run.flags, "search") else ""
    converted = " converted" if run.init_from else ""
    return f"{arch}{search}{converted}" + (f" drop {drop}" if drop else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("--out", required=True, help="a scratch folder for the timing runs")
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    plan = load_plan(args.plan)
    paths = StudyPaths(Path(args.out).resolve())
    paths.out.mkdir(parents=True, exist_ok=True)
    prepare_data(plan, paths, lambda m: print(m, file=sys.stderr))
    seed = plan.seeds[0]
    first = [r for r in plan.runs() if r.seed == seed and r.after is None]
    kept = paths.out / "timings.json"
    timed: dict[str, dict[str, float]] = {}
    if kept.is_file():
        saved = json.loads(kept.read_text())
        if saved.get("steps") == args.steps:
            timed = saved["sizes"]
            arms = ", ".join(t["arm"] for t in timed.values())
            print(f"timings kept in {kept}: {arms}", flush=True)
    for run in first:
        size = size_of(run)
        if size in timed:
            continue
        started = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "partf.cli.train",
                *train_args(plan, paths, run),
                f"--max_steps={args.steps}",
            ],  # fmt: skip
            env=run_environment(os.environ),
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - started
        if result.returncode != 0:
            print(result.stdout[-2000:], result.stderr[-2000:], file=sys.stderr)
            return 1
        results = json.loads(paths.run(run.name).results_path.read_text())
        logdir = paths.run_dir(run.name) / "logs" / run.name / "train"
        rates = [v for step, v in event_scalars(logdir).get("tokens_per_second", []) if step > 50]
        tokens_per_step = results["data"]["batch_size"] * results["data"]["seq_len"]
        rate = statistics.median(rates) / tokens_per_step  # steps per second
        timed[size] = {
            "arm": run.arm,
            "rate": rate,
            "overhead": max(wall - args.steps / rate, 0.0),
            "batches_per_epoch": results["data"]["batches_per_epoch"],
        }
        kept.write_text(json.dumps({"steps": args.steps, "sizes": timed}, indent=1))
        print(
            f"{run.arm:>10}: {rate * tokens_per_step:9,.0f} tokens/s, {wall:6.1f} s for "
            f"{args.steps} steps, {timed[size]['overhead']:5.1f} s besides  [{size}]",
            flush=True,
        )

    def steps_of(run: Run, batches_per_epoch: int) -> int:
        """The run's updates: its --max_steps, else its epochs of batches (partf-train's
        default of one epoch), its own flags before the plan's."""
        flags = (*plan.flags, *run.flags)
        if flag(flags, "max_steps"):
            return int(flag(flags, "max_steps"))
        return int(flag(flags, "epochs") or 1) * batches_per_epoch

    def estimate(run: Run) -> float:
        if run.after is None:
            figures = timed[size_of(run)]
            return (
                figures["overhead"] + steps_of(run, figures["batches_per_epoch"]) / figures["rate"]
            )
        search = next(r for r in first if r.name == run.after)
        steps = steps_of(search, timed[size_of(search)]["batches_per_epoch"])
        # The slowest fixed size among those timed stands for the derived model.
        slowest = min((f for s, f in timed.items() if "search" not in s), key=lambda f: f["rate"])
        return slowest["overhead"] + steps / slowest["rate"]

    per_seed = sum(estimate(r) for r in plan.runs() if r.seed == seed)
    count = sum(r.seed == seed for r in plan.runs())
    print(
        f"one seed: {count} runs, {per_seed:,.0f} s ({per_seed / 3600:.2f} h); "
        f"{len(plan.seeds)} seeds: {per_seed * len(plan.seeds) / 3600:.1f} h, one run at a "
        f"time on {machine_name()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
