"""partf-study: the PAR workflow as one resumable command (docs/study.md).

A PLAN (TOML, `partf.study.plan`, studies/) names the data, the shared flags, the arms
and the seeds; every run is an ordinary partf-train run under OUT/runs/<name>/.

    partf-study studies/tiny.toml --out /tmp/tiny --workers 2   # run (again: resume)
    partf-study PLAN --out DIR --list      # the ready runs' partf-train commands
    partf-study PLAN --out DIR --report    # rewrite DIR/report.md and DIR/pareto.png

Several machines sharing DIR can each take runs from `--list`: a run's folder lock keeps
any run from being trained twice at once.

Exit status: 0 every selected run finished, 1 a run failed, 2 bad usage (a bad plan),
128 + N stopped by signal N (the same command resumes).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from partf.cli import exits, train

if TYPE_CHECKING:
    from partf.study.plan import Plan, Run

PROG = "partf-study"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {message} (see {PROG} --help)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Run a PAR study (searches, their stage 2, fixed baselines) over seeds.",
        epilog="Example: partf-study studies/tiny.toml --out /tmp/tiny --workers 2",
    )
    parser.add_argument("plan", help="the study's TOML plan (see studies/)")
    parser.add_argument(
        "--out",
        help="the study's folder of run folders (keep it outside the checkout); --report "
        "of a plan with a `results` folder needs none: it reads the committed records",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="runs trained at once, each its own process"
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="print the partf-train command of every ready, unfinished run, and exit",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="only rewrite report.md and its plots from the run records (of --arms and "
        "--seeds where given), and exit",
    )
    parser.add_argument(
        "--arms", nargs="+", metavar="ARM", help="run these arms only (and their stage 2)"
    )
    parser.add_argument("--seeds", nargs="+", type=int, metavar="SEED", help="run these seeds only")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks")
    return parser


def check_flags(plan: Plan) -> None:
    """Parses every run's flags as partf-train would (without Keras), so that a typo in
    the plan fails now, not hours into the study: PlanError naming the first run's arm."""
    from partf.study.plan import PlanError

    parser = train.build_parser(train.attention_options())
    for run in plan.runs():
        start = ["--init_from=x"] if run.init_from is not None else []
        if run.after is not None:
            argv = ["--from_search=x", *start, *run.flags]
        else:
            argv = ["--train_directory=x", *start, *run.flags, f"--seed={run.seed}"]
        try:
            parser.parse_args(argv)
        except train.UsageExit as e:
            arm = run.arm.removesuffix("-stage2")
            raise PlanError(f"plan {plan.path}: arm {arm}: {e}") from None


def with_needed(selected: list[Run], every: list[Run]) -> list[Run]:
    """`selected` and the runs they start from or derive from (a conversion's trained
    source, a stage 2's search), recursively, in the plan's order."""
    by_name = {run.name: run for run in every}
    wanted = {run.name for run in selected}
    pending = list(wanted)
    while pending:
        for name in by_name[pending.pop()].needs:
            if name not in wanted:
                wanted.add(name)
                pending.append(name)
    return [run for run in every if run.name in wanted]


def _say(message: str) -> None:
    now = datetime.datetime.now().strftime("%H:%M:%S")
    print(f"{PROG} {now} {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    verbose = args.verbose
    exits.quiet_tensorflow(verbose)  # the report's TensorBoard reader may load TensorFlow

    from partf.errors import UsageError, os_error_message
    from partf.study.data import prepare_data
    from partf.study.paths import StudyPaths
    from partf.study.plan import load_plan
    from partf.study.records import finished_runs, read_records
    from partf.study.report import write_report
    from partf.study.runner import list_commands, machine_name, run_study

    if args.workers < 1:
        return exits.fail(
            PROG, f"--workers must be 1 or more, not {args.workers}.", 2, None, verbose
        )
    try:
        plan = load_plan(args.plan)
        if args.out is None and not (args.report and plan.results is not None):
            raise UsageError(
                "--out is required: the study's folder"
                + ("" if args.report else " (only --report of a plan with `results` reads none)")
                + "."
            )
        paths = StudyPaths(Path(args.out).resolve()) if args.out else None
        runs = plan.runs()
        arms = {arm.name for arm in plan.arms}
        unknown = sorted(set(args.arms or ()) - arms)
        if unknown:
            raise UsageError(
                f"--arms {unknown[0]} is not in the plan; its arms: {', '.join(sorted(arms))}."
            )
        missing = sorted(set(args.seeds or ()) - set(plan.seeds))
        if missing:
            raise UsageError(
                f"--seeds {missing[0]} is not in the plan; its seeds: {list(plan.seeds)}."
            )
        if args.arms:
            runs = [r for r in runs if r.arm.removesuffix("-stage2") in args.arms]
        if args.seeds:
            runs = [r for r in runs if r.seed in args.seeds]
        runs = with_needed(runs, plan.runs())
        if args.report:
            folder = plan.results_folder(paths.out if paths else None)
            if not (folder / "records").is_dir() and not (paths and (paths.out / "runs").is_dir()):
                raise UsageError(
                    f"{folder} holds no run records yet; run partf-study {args.plan} --out "
                    f"{args.out or 'DIR'} first."
                )
            only, command = None, ""
            if args.arms or args.seeds:  # report what was asked for, like with like
                only = {run.name for run in runs}
                given = (("arms", args.arms), ("seeds", args.seeds))
                command = "".join(f" --{flag} {' '.join(map(str, v))}" for flag, v in given if v)
                command += " --report"
            _say(f"report: {write_report(plan, paths, only, command)}")
            return 0
        check_flags(plan)
        paths.out.mkdir(parents=True, exist_ok=True)
        prepare_data(plan, paths, _say)
        if args.list:
            for line in list_commands(plan, paths, runs):
                print(line, flush=True)
            return 0
        stage2 = ", with stage 2" if any(r.after for r in runs) else ""
        arm_count = len({r.arm for r in runs if r.after is None})
        seed_count = len({r.seed for r in runs})
        _say(
            f"{plan.path.name}: {len(runs)} runs ({arm_count} arms x {seed_count} "
            f"seeds{stage2}), {args.workers} at once, in {paths.out}"
        )
        # Runs with a committed record of this machine are done, even where their folder
        # is gone, and so is every seed one machine recorded whole; a seed another machine
        # left unfinished trains here from its first run, as a seed's runs all come from
        # one machine (partf.study.records.finished_runs, docs/recall.md).
        records = read_records(plan.results_folder(paths.out) / "records")
        recorded = finished_runs(records, plan, machine_name())
        outcome = run_study(
            plan, paths, runs, args.workers, _say, lambda: write_report(plan, paths), recorded
        )
        _say(f"report: {write_report(plan, paths)}")
    except UsageError as e:
        return exits.fail(PROG, str(e), 2, e, verbose)
    except OSError as e:
        fix = "free some space, then run the same command again"
        return exits.fail(PROG, os_error_message(e, "while writing the study", fix), 1, e, verbose)
    if outcome.signum is not None:
        _say("stopped; run the same command again to resume")
        return 128 + outcome.signum
    if outcome.failed:
        names = ", ".join(f"{n} (status {s})" for n, s in outcome.failed.items())
        return exits.fail(PROG, f"runs failed: {names}; see their console.log.", 1, None, verbose)
    return 0


def run() -> NoReturn:
    """Console entry point `partf-study`."""
    sys.exit(main())


if __name__ == "__main__":
    run()
