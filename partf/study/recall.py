"""The recall part of a study's report (docs/recall.md): for arms trained on the plan's MQAR
task, answer accuracy beside measured training time (`recall_table`), the mean accuracy
of each set of fixed placements (`placement_table`, a random placement's expected
accuracy when the set holds every placement), the prices each search paid
(`cost_lines`, from `cost_table.json`; a format-1 table is in microseconds alone), and
accuracy against training microseconds per token (`recall_plot`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from partf.study.pareto import arm_groups, new_plot, save_plot

#: Mechanisms that are softmax attention over the whole context (the rest are
#: sliding-window or linear).
SOFTMAX = ("relative", "softmax", "attention", "A")

#: Plot markers by the kind of placement an arm is; conversions are triangles, as on the
#: Pareto plot.
MARKERS = {"search": "*", "stage2": "P", "converted": "^", "control": "o", "other": "s"}


def accuracy(run: Any, split: str) -> float | None:
    """A finished run's accuracy on `split` in %, or None (not a recall run)."""
    value = run.value(split, "accuracy")
    return None if value is None else 100.0 * value


def train_us_per_token(run: Any, side_by_side: bool = False) -> float | None:
    """Microseconds per training token, or None: from benchmarks/study_speed.py's
    side-by-side figure (`side_by_side`), else from the run's median logged rate."""
    if side_by_side:
        rate = (run.speed or {}).get("train_tokens_per_second")
        return 1e6 / rate if rate else None
    shape = (run.results or {}).get("data") or {}
    if run.steps_per_second and shape.get("batch_size") and shape.get("seq_len"):
        return 1e6 / (run.steps_per_second * shape["batch_size"] * shape["seq_len"])
    return None


def times(
    rows: Sequence[Any], reference: str | None
) -> tuple[Callable[[Any], float | None], str, str]:
    """How the recall runs of `rows` are timed, the table column's name and the plot
    axis's label: microseconds per training token (side by side where every run has that
    figure, else each run's own rate), or, where the runs come from more than one
    machine, each run's time over the `reference` arm's run of the same seed, which ran
    on the same machine (a seed is one machine), so that no figure compares two CPUs."""
    paired = side_by_side(rows)
    how = "side by side" if paired else "own run"
    source = "side by side, study_speed.py" if paired else "each run's median logged rate"
    machines = {r.machine for row in recall_rows(rows) for r in row.runs}
    base = {r.seed: r for row in rows if row.arm == reference for r in row.runs}
    if len(machines) < 2 or not base:
        return (
            lambda run: train_us_per_token(run, paired),
            f"train us/token ({how})",
            f"measured training time per token (us; {source})",
        )

    def ratio(run: Any) -> float | None:
        own = train_us_per_token(run, paired)
        seed_reference = base.get(run.seed)
        below = train_us_per_token(seed_reference, paired) if seed_reference is not None else None
        return own / below if own is not None and below else None

    return (
        ratio,
        f"train time x {reference} of its seed ({how})",
        f"training time per token over its seed's {reference} run ({source})",
    )


def side_by_side(rows: Sequence[Any]) -> bool:
    """Whether every recall run of `rows` was timed side by side (study_speed.py's
    speed.json): then those figures are the times, one machine and load for all; a run's
    own logged rate depends on what shared the machine with it, so the two never mix."""
    timed = [r for row in recall_rows(rows) for r in row.runs if accuracy(r, "test") is not None]
    return bool(timed) and all((r.speed or {}).get("train_tokens_per_second") for r in timed)


def softmax_blocks(architecture: str | None) -> str:
    """ "k of n": blocks of softmax attention among the attention places (blocks that are
    neither dense nor identity) of an architecture string."""
    if not architecture:
        return "-"
    places = [t for t in architecture.split() if t not in ("D", "I", "dense", "identity")]
    return f"{sum(t in SOFTMAX for t in places)} of {len(places)}"


def spread(values: Sequence[float], digits: int = 2) -> str:
    """ "mean (min-max)" of `values`, or the value alone, or "-"."""
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def recall_rows(rows: Sequence[Any]) -> list[Any]:
    """The rows (report `ArmRow`s) whose runs were scored by accuracy."""
    return [row for row in rows if any(accuracy(r, "valid") is not None for r in row.runs)]


def recall_table(rows: Sequence[Any], reference: str | None = None) -> list[str]:
    """Markdown lines of the recall table (empty when no row has accuracy); `reference`,
    the plan's reference arm, times the runs where they come from several machines
    (`times`)."""
    rows = recall_rows(rows)
    if not rows:
        return []
    timed, column, _ = times(rows, reference)
    lines = [
        f"| arm | seeds | test accuracy % | valid accuracy % | {column} | softmax blocks "
        "| architectures |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        test = [v for r in row.runs if (v := accuracy(r, "test")) is not None]
        valid = [v for r in row.runs if (v := accuracy(r, "valid")) is not None]
        times_ = [v for r in row.runs if (v := timed(r)) is not None]
        archs = [(r.results or {}).get("architecture") for r in row.runs]
        kinds = sorted({softmax_blocks(a) for a in archs})
        shown = "; ".join(f"`{a}`" for a in dict.fromkeys(archs) if a)
        lines.append(
            f"| {row.arm} | {len(row.runs)}/{row.planned} | {spread(test, 1)} | {spread(valid, 1)} "
            f"| {spread(times_)} | {', '.join(kinds)} | {shown or '-'} |"
        )
    return lines


def _chosen(run: Any) -> bool:
    """Whether a run's architecture was chosen for it (a search, or the training-free
    selection of `--drop_attention`) rather than fixed by hand."""
    training = ((run.results or {}).get("config") or {}).get("training") or {}
    return bool((run.results or {}).get("search") or training.get("drop_attention"))


def _fixed_placement(row: Any) -> tuple[tuple[int, int, int, bool, str], str] | None:
    """(softmax places, attention places, blocks, converted, the other places' mixers)
    and the architecture of an arm whose finished runs all trained one mixed architecture
    fixed by hand, else None (a search, a selection, a stage 2, or every place the same
    kind)."""
    runs = [r for r in row.runs if accuracy(r, "test") is not None]
    if row.arm.endswith("-stage2") or not runs or any(_chosen(r) for r in runs):
        return None
    archs = {(r.results or {}).get("architecture") for r in runs}
    if len(archs) != 1 or None in archs:
        return None
    arch = archs.pop()
    places = [t for t in arch.split() if t not in ("D", "I", "dense", "identity")]
    softmax = sum(t in SOFTMAX for t in places)
    if softmax in (0, len(places)):
        return None
    others = "+".join(sorted({t for t in places if t not in SOFTMAX}))
    return (softmax, len(places), len(arch.split()), runs[0].source is not None, others), arch


def placement_table(rows: Sequence[Any]) -> list[str]:
    """Markdown lines: for every set of two or more arms that place the same number of
    softmax places among the same attention places, trained the same way (from scratch or
    converted from another run), the set's mean test accuracy per seed (seeds where every
    arm of the set finished), and its mean and min-max over those seeds. When the set holds
    every placement, its mean is the expected accuracy of a placement drawn at random,
    the control a searched placement of that count is measured against."""
    groups: dict[tuple[int, int, int, bool, str], dict[str, Any]] = {}
    for row in recall_rows(rows):
        found = _fixed_placement(row)
        if found is not None:
            key, arch = found
            groups.setdefault(key, {})[arch] = row
    lines = []
    for (softmax, places, blocks, converted, others), arms in sorted(groups.items()):
        if len(arms) < 2:
            continue
        by_arm = [
            {r.seed: v for r in row.runs if (v := accuracy(r, "test")) is not None}
            for row in arms.values()
        ]
        seeds = sorted(set.intersection(*(set(scores) for scores in by_arm)))
        means = [statistics.fmean(scores[seed] for scores in by_arm) for seed in seeds]
        every = math.comb(places, softmax)
        shown = "all" if len(arms) == every else f"{len(arms)} of {every}"
        per_seed = ", ".join(f"s{seed} {mean:.1f}" for seed, mean in zip(seeds, means, strict=True))
        trained = "converted" if converted else "from scratch"
        lines.append(
            f"| {softmax} of {places} ({blocks} blocks), {others} beside | {trained} "
            f"| {shown}: {', '.join(row.arm for row in arms.values())} | {per_seed or '-'} "
            f"| {spread(means, 1)} |"
        )
    if not lines:
        return []
    header = [
        "| softmax places | trained | placements | mean test accuracy % per seed "
        "| over seeds: mean (min-max) |",
        "|---|---|---|---|---:|",
    ]
    return header + lines


def cost_lines(records: Sequence[Any]) -> list[str]:
    """One line per finished search with a measured cost table: its prices, in dense
    blocks and microseconds per token (format 2) or in microseconds (format 1)."""
    lines = []
    for record in records:
        table = record.cost_table
        if not record.finished or not (record.results or {}).get("search") or not table:
            continue
        costs = _figures(table.get("costs", {}))
        if table.get("unit") == "dense":
            unit = f"dense blocks; us/token {_figures(table.get('microseconds', {}))}"
        else:
            unit = "us/token"
        lines.append(
            f"- {record.name}: {costs} ({unit}; forward and backward, batch "
            f"{table.get('batch_size')} x {table.get('seq_len')}, {table.get('backend')} on "
            f"{table.get('machine')})"
        )
    return lines


def _figures(figures: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in sorted(figures.items()))


def kind_of(
    arm: str, controls: Sequence[str], searches: Sequence[str], conversions: Sequence[str] = ()
) -> str:
    """The kind of placement an arm is: a search or its stage 2 (whatever it started from),
    a fixed conversion of a trained run, a control, or other."""
    if arm.endswith("-stage2"):
        return "stage2"
    if arm in searches:
        return "search"
    if arm in conversions:
        return "converted"
    return "control" if arm in controls else "other"


def recall_plot(
    rows: Sequence[Any],
    path: Path,
    title: str,
    controls: Sequence[str],
    searches: Sequence[str],
    conversions: Sequence[str] = (),
    reference: str | None = None,
) -> bool:
    """Writes test accuracy against training time per token (`times`); False when no
    recall run has both figures. `conversions`: arms started from a trained run
    (`init_from`)."""
    timed, _, axis = times(rows, reference)
    rows = recall_rows(rows)
    points = [
        (row.arm, t, a)
        for row in rows
        for r in row.runs
        if (t := timed(r)) is not None and (a := accuracy(r, "test")) is not None
    ]
    if not points:
        return False
    figure, axes, colors = new_plot()
    for i, row, xs, ys in arm_groups(rows, points):
        color = colors[i % len(colors)]
        axes.scatter(xs, ys, s=12, color=color, alpha=0.4)
        kind = kind_of(row.arm, controls, searches, conversions)
        axes.scatter(
            [statistics.fmean(xs)],
            [statistics.fmean(ys)],
            s=80,
            marker=MARKERS[kind],
            color=color,
            edgecolors="black",
            linewidths=0.5,
            label=f"{row.arm} ({kind}, n={len(xs)})",
        )
    axes.set_xlabel(axis)
    axes.set_ylabel("MQAR test accuracy (%)")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=6, loc="best", ncol=2)
    save_plot(figure, path)
    return True
