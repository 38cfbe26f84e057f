"""A study's report: `report.md` and `pareto.png`, from what its runs wrote; docs/study.md
("The report") gives its tables' columns and what the plot draws."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from partf.study import records as run_records
from partf.study.pareto import front_at, front_points, pareto_plot
from partf.study.paths import StudyPaths
from partf.study.plan import Plan
from partf.study.recall import (
    accuracy,
    cost_lines,
    placement_table,
    recall_plot,
    recall_table,
    spread,
)
from partf.study.records import read_records, sync_records, write_text


@dataclasses.dataclass
class RunRecord:
    """What the report knows of one planned run: its record (partf.study.records), or
    None where no record was written."""

    name: str
    arm: str
    seed: int
    where: str  # the heading of its table (partf.study.records.tables), or "no record"
    results: dict[str, Any] | None
    decided_step: int | None = None
    steps_per_second: float | None = None
    source: RunRecord | None = None  # the run it started from (--init_from)
    speed: dict[str, float] | None = None  # benchmarks/study_speed.py's figures
    cost_table: dict[str, Any] | None = None  # a search's measured costs
    machine: str = ""  # the machine it trained on

    @property
    def finished(self) -> bool:
        return self.results is not None

    @property
    def train_flops(self) -> float | None:
        """Training FLOPs of this run and of every run it started from; None when one of
        them has not finished (or predates the count)."""
        own = self.value("train_flops", "total")
        if own is None or self.source is None:
            return own
        before = self.source.train_flops
        return None if before is None else own + before

    def value(self, *keys: str) -> float | None:
        """A number of results.json by its path of keys, or None."""
        found: Any = self.results
        for key in keys:
            if not isinstance(found, dict):
                return None
            found = found.get(key)
        return float(found) if isinstance(found, (int, float)) else None


def gather(plan: Plan, records: Sequence[Mapping[str, Any]]) -> list[RunRecord]:
    """A `RunRecord` for every record of a run of the plan, and one without results for
    each run with no record, each in its table (`partf.study.records.tables`: a seed's
    runs from one machine). A run started from another (`--init_from`) is linked to that
    run's record in its own table."""
    tables = {
        heading: {record["run"]: record for record in held}
        for heading, held in run_records.tables(records).items()
    }
    runs = plan.runs()
    found: list[RunRecord] = []
    for place, table in tables.items():
        mine = [
            RunRecord(
                run.name,
                run.arm,
                run.seed,
                place,
                dict(record["results"]),
                record.get("decided_step"),
                record.get("steps_per_second"),
                speed=record.get("speed"),
                cost_table=record.get("cost_table"),
                machine=record["machine"],
            )
            for run in runs
            if (record := table.get(run.name))
        ]
        by_name = {record.name: record for record in mine}
        for run in runs:
            if run.name in by_name and run.init_from is not None:
                by_name[run.name].source = by_name.get(run.init_from)
        found += mine
    recorded = {record.name for record in found}
    found += [
        RunRecord(run.name, run.arm, run.seed, "no record", None)
        for run in runs
        if run.name not in recorded
    ]
    return found


# ------------------------------------------------------------------ numbers
def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _against(value: float | None, reference: float | None) -> str:
    if value is None or reference is None or reference == 0:
        return "-"
    return f"{100.0 * (value / reference - 1.0):+.1f}%"


@dataclasses.dataclass
class ArmRow:
    """An arm's finished runs in one table, and its planned seeds."""

    arm: str
    planned: int
    runs: list[RunRecord]

    def values(self, *keys: str) -> list[float]:
        return [v for r in self.runs if (v := r.value(*keys)) is not None]


def _architectures(row: ArmRow) -> str:
    parts = []
    for run in row.runs:
        text = f"`{run.results.get('architecture')}`"
        if run.decided_step is not None:
            text += f" @{run.decided_step:,}"
        elif run.results.get("search"):
            text += " (undecided)"
        parts.append(text)
    return "; ".join(parts) or "-"


def against_front(
    valid: float | None,
    flops: float | None,
    front: list[tuple[float, float]],
    reference: float | None,
    matched: float | None,
) -> str:
    """An arm's mean validation perplexity against the hand-made front at its FLOPs.

    An arm with a training-matched arm (a conversion, which trained an epoch more than
    the front's models) is compared by ratios, each model against the one it was trained
    as long as: its perplexity over its matched arm's, against the front's over the
    reference's. Read absolutely, the conversion's extra epoch would count as a win."""
    at_front = front_at(front, flops)
    if matched is None:
        return _against(valid, at_front)
    if None in (valid, at_front, reference):
        return "-"
    return _against(valid / matched, at_front / reference)


def table(
    rows: list[ArmRow],
    reference: str | None,
    controls: Sequence[str] = (),
    matched: Mapping[str, str] | None = None,
    conversions: Mapping[str, str] | None = None,
) -> list[str]:
    """The markdown lines of one table; `matched` maps an arm to its training-matched arm,
    `conversions` an arm started from a trained run to the arm it started from."""
    matched, conversions = matched or {}, conversions or {}
    means = {row.arm: _mean(row.values("valid", "perplexity")) for row in rows}
    ref = next((r for r in rows if r.arm == reference), None)
    front = front_points(rows, controls, reference)
    ref_valid = _mean(ref.values("valid", "perplexity")) if ref else None
    ref_flops = _mean(ref.values("flops_per_token", "total")) if ref else None
    # Runs that also answered MQAR (--recall_directory): their accuracy beside perplexity.
    recall = any(accuracy(r, "recall") is not None for row in rows for r in row.runs)
    lines = [
        "| arm | seeds | valid ppl | vs ref | test ppl | vs ref | "
        + ("recall accuracy % | " if recall else "")
        + "architectures (decided at) "
        "| MFLOPs/token blocks | total | vs ref | vs hand-made front | vs matched "
        "| train TFLOPs | train steps/s | test ms/batch |",
        "|---|---|---:|---:|---:|---:|" + ("---:|" if recall else "") + "---|---:|---:|---:|"
        "---:|---:|---:|---:|---:|",
    ]
    side_by_side = any(r.speed for row in rows for r in row.runs)
    if side_by_side:
        lines[0] += " train tokens/s, side by side | eval ms/batch | generate ms/token |"
        lines[1] += "---:|---:|---:|"
    ref_test = _mean(ref.values("test", "perplexity")) if ref else None
    for row in rows:
        valid = row.values("valid", "perplexity")
        test = row.values("test", "perplexity")
        blocks = [v / 1e6 for v in row.values("flops_per_token", "blocks")]
        flops = row.values("flops_per_token", "total")
        total = [v / 1e6 for v in flops]
        speeds = [r.steps_per_second for r in row.runs if r.steps_per_second is not None]
        latency = row.values("eval_ms_per_batch", "test")
        compute = [r.train_flops / 1e12 for r in row.runs if r.train_flops is not None]
        name = f"**{row.arm}** (reference)" if row.arm == reference else row.arm
        if row.arm in controls:
            name += " (hand-made)"
        mean_valid, matched_valid = _mean(valid), means.get(matched.get(row.arm, ""))
        if row.arm in controls or row.arm == reference:
            versus_front = "-"
        elif row.arm in conversions and matched_valid is None:
            versus_front = "-"  # trained longer than the front, and nothing matches it
        else:
            versus_front = against_front(mean_valid, _mean(flops), front, ref_valid, matched_valid)
        answered = [v for r in row.runs if (v := accuracy(r, "recall")) is not None]
        lines.append(
            f"| {name} | {len(row.runs)}/{row.planned} | {spread(valid)} "
            f"| {_against(mean_valid, ref_valid)} | {spread(test)} "
            f"| {_against(_mean(test), ref_test)} | "
            + (f"{spread(answered)} | " if recall else "")
            + f"{_architectures(row)} "
            f"| {spread(blocks, 3)} | {spread(total, 3)} "
            f"| {_against(_mean(flops), ref_flops)} | {versus_front} "
            f"| {_against(mean_valid, matched_valid)} "
            f"| {spread(compute, 1)} | {spread(speeds, 1)} | {spread(latency, 1)} |"
        )
        if side_by_side:
            lines[-1] += " " + " ".join(
                f"{spread([r.speed[key] for r in row.runs if r.speed and key in r.speed], d)} |"
                for key, d in (
                    ("train_tokens_per_second", 0),
                    ("eval_ms_per_batch", 1),
                    ("generate_ms_per_token", 1),
                )
            )
    return lines


# ------------------------------------------------------------------ writing
def shown_path(path: Path) -> str:
    """`path` as a report shows it: relative to the repository that holds it (the same on
    every clone), else as it is."""
    for folder in path.parents:
        if (folder / ".git").exists():
            return path.relative_to(folder).as_posix()
    return str(path)


def linking_line(first: list[RunRecord], finished: list[RunRecord], reference: str | None) -> str:
    """A sentence giving the figure that links a table to the first one: an arm both
    hold (the reference where it can), its mean test accuracy or validation perplexity
    in each; empty when they share no arm."""
    shared = [r.arm for r in finished if r.arm in {f.arm for f in first}]
    if not shared:
        return ""
    arm = reference if reference in shared else shared[0]

    def figure(runs: list[RunRecord]) -> tuple[str, float | None]:
        mine = [r for r in runs if r.arm == arm]
        test = [v for r in mine if (v := accuracy(r, "test")) is not None]
        if test:
            return "test accuracy %", statistics.fmean(test)
        valid = [v for r in mine if (v := r.value("valid", "perplexity")) is not None]
        return "valid ppl", statistics.fmean(valid) if valid else None

    (kind, here), (_, there) = figure(finished), figure(first)
    if here is None or there is None:
        return ""
    return (
        f"Linked to the first table by `{arm}`: {kind} {here:.2f} here, {there:.2f} there "
        f"(means over the seeds each table holds)."
    )


def wall_line(finished: list[RunRecord]) -> str:
    """A sentence giving each seed's wall time in a table: the sum of its runs'
    `wall_time_seconds` (across a run's resumes, its start-up and scoring included, and
    whatever shared the machine with it); empty when no run has one."""
    seeds: dict[int, list[float]] = {}
    for run in finished:
        wall = run.value("wall_time_seconds")
        if wall is not None:
            seeds.setdefault(run.seed, []).append(wall)
    if not seeds:
        return ""
    parts = [
        f"seed {seed} {sum(walls) / 3600:.2f} h ({len(walls)} run{'s' if len(walls) > 1 else ''})"
        for seed, walls in sorted(seeds.items())
    ]
    return f"Wall time of the runs, summed per seed: {', '.join(parts)}."


def write_report(
    plan: Plan,
    paths: StudyPaths | None,
    only: Collection[str] | None = None,
    command: str = "",
    into: Path | None = None,
) -> Path:
    """Writes report.md and its plots into the plan's results folder (its `results`, else
    the study folder) from its run records alone; returns report.md.

    Where the study folder `paths` holds run folders, the records of its finished runs
    are written (or refreshed) first. `only` names the runs to report (all of the plan's
    when None), so that a report of one seed or a few arms compares like with like;
    `command` is the selection's flags, added to the report's "Reproduce" line; `into`
    writes the report and plots there instead of the results folder. A record that
    cannot be read raises RecordError.
    """
    folder = plan.results_folder(paths.out if paths is not None else None)
    if paths is not None and (paths.out / "runs").is_dir():
        sync_records(plan, paths, folder / "records")
    records = gather(plan, read_records(folder / "records"))
    here = into if into is not None else folder
    here.mkdir(parents=True, exist_ok=True)
    if only is not None:
        records = [record for record in records if record.name in only]
    groups: dict[str, list[RunRecord]] = {}
    for record in records:
        if record.finished:
            groups.setdefault(record.where, []).append(record)
    planned = len({r.seed for r in records})  # the plan's seeds, or those asked for
    plan_name = shown_path(plan.path)
    out = " --out DIR" if plan.results is None else ""
    lines = [
        f"# Study: {plan.path.name}",
        "",
        plan.description,
        "",
        f"Reproduce: `partf-study {plan_name} --out DIR` trains the runs; `partf-study "
        f"{plan_name}{out}{command or ' --report'}` rebuilds this page from their records. "
        f"{len({r.name for r in records if r.finished})} of {len({r.name for r in records})} "
        "runs have a record.",
        "",
        "Perplexity is exact (token-weighted) on the validation and test records; "
        "'vs ref' compares means with the reference arm's in the same table; 'vs "
        "hand-made front' with the best hand-made model of at most the same FLOPs; 'vs "
        "matched' with the arm trained as long but with nothing removed (a conversion "
        "trains longer than the models trained from scratch, and that alone lowers its "
        "perplexity). So a conversion's 'vs hand-made front' compares ratios: its "
        "perplexity over its matched arm's against the front's over the reference's "
        "('-' for one with no matched arm). On the plot, conversions are triangles, each "
        "with an arrow from its matched arm.",
    ]
    if any(accuracy(r, "recall") is not None for r in records if r.finished):
        lines[-1] += (
            " 'recall accuracy %': the answers of the [mqar] test split a run got exactly "
            "right after training on text with MQAR batches mixed in."
        )
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    controls, matched = plan.control_arms(), plan.matched_arms()
    conversions = plan.conversion_arms()
    for index, (where, finished) in enumerate(ordered):
        rows = [
            ArmRow(arm, planned, [r for r in finished if r.arm == arm]) for arm in plan.arm_names()
        ]
        rows = [row for row in rows if row.runs]
        plot = "pareto.png" if index == 0 else f"pareto-{index + 1}.png"
        lines += ["", f"## {where}", ""]
        link = linking_line(ordered[0][1], finished, plan.reference) if index else ""
        if link:
            lines += [link, ""]
        wall = wall_line(finished)
        if wall:
            lines += [wall, ""]
        lines += table(rows, plan.reference, controls, matched, conversions)
        title = f"{plan.path.name}: {where}"
        drawn = pareto_plot(
            rows, plan.reference, here / plot, title, controls, conversions, matched
        )
        if drawn:
            lines += ["", f"![validation perplexity against FLOPs per token]({plot})"]
        recall_lines = recall_table(rows, plan.reference)
        if recall_lines:
            lines += ["", f"### Recall ({where})", "", *recall_lines]
            placements = placement_table(rows)
            if placements:
                lines += [
                    "",
                    "Fixed placements by their count of softmax places (with every "
                    "placement, the mean is a random placement's expected accuracy):",
                    "",
                    *placements,
                ]
            searches = [arm.name for arm in plan.arms if arm.stage2]
            recall_png = "recall.png" if index == 0 else f"recall-{index + 1}.png"
            if recall_plot(
                rows,
                here / recall_png,
                title,
                controls,
                searches,
                list(conversions),
                plan.reference,
            ):
                lines += ["", f"![MQAR accuracy against training time per token]({recall_png})"]
    prices = cost_lines(records)
    if prices:
        lines += ["", "## Measured costs of each search (--search_cost=time)", "", *prices]
    searches = [r for r in records if r.finished and r.results.get("search")]
    if searches and paths is not None and folder == paths.out:  # the run folders beside it
        lines += ["", "## pi during each search", ""]
        for r in searches:
            gif = Path("runs") / r.name / "plots" / r.name / "pi.gif"
            lines.append(f"- {r.name}: [{gif}]({gif})")
    open_runs = [r.name for r in records if not r.finished]
    if open_runs:
        lines += ["", f"No record yet ({len(open_runs)}): {', '.join(open_runs)}."]
    path = here / "report.md"
    write_text(path, "\n".join(lines) + "\n")
    return path
