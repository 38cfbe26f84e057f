"""The hand-made front of a study's report and its Pareto plot: validation perplexity
against forward FLOPs per token, the controls' front as a step line, conversions marked
apart (see `partf.study.report`)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from partf.atomic import atomic_path


def front_points(
    rows: Sequence[Any], controls: Sequence[str], reference: str | None
) -> list[tuple[float, float]]:
    """The hand-made front: (mean forward FLOPs per token, mean validation perplexity) of
    the `controls` and the `reference` (all trained from scratch by hand) that no other
    of them beats on both, by FLOPs."""
    points = []
    for row in rows:
        flops, valid = row.values("flops_per_token", "total"), row.values("valid", "perplexity")
        if (row.arm in controls or row.arm == reference) and flops and valid:
            points.append((statistics.fmean(flops), statistics.fmean(valid)))
    front: list[tuple[float, float]] = []
    for x, y in sorted(points):
        if not front or y < front[-1][1]:
            front.append((x, y))
    return front


def front_at(front: list[tuple[float, float]], flops: float | None) -> float | None:
    """The hand-made front's perplexity at `flops`: the best control at or below that
    cost (a step, as a practitioner picks among models they have); None below the
    cheapest."""
    if flops is None:
        return None
    below = [y for x, y in front if x <= flops * (1 + 1e-9)]
    return min(below) if below else None


def arm_groups(
    rows: Sequence[Any], points: Sequence[tuple[str, float, float]]
) -> Iterator[tuple[int, Any, tuple[float, ...], tuple[float, ...]]]:
    """(index, row, xs, ys) of each row that has points among `points` ((arm, x, y)): a
    plot draws each arm's runs in the colour of its index."""
    for i, row in enumerate(rows):
        mine = [(x, y) for arm, x, y in points if arm == row.arm]
        if mine:
            xs, ys = zip(*mine, strict=True)
            yield i, row, xs, ys


def pareto_plot(
    rows: Sequence[Any],
    reference: str | None,
    path: Path,
    title: str,
    controls: Sequence[str] = (),
    conversions: Mapping[str, str] | None = None,
    matched: Mapping[str, str] | None = None,
) -> bool:
    """Writes the Pareto plot of one table, the hand-made front (the `controls`' means
    that no other control beats) as a grey step line, the `conversions` as triangles with
    an arrow from their `matched` arm, and the front scaled by each matched arm's mean
    over the reference's (dashed); False when no run has finished. `conversions` maps an
    arm started from a trained run to the arm it started from."""
    conversions, matched = conversions or {}, matched or {}
    points = [
        (row.arm, r.value("flops_per_token", "total"), r.value("valid", "perplexity"))
        for row in rows
        for r in row.runs
    ]
    points = [(a, x / 1e6, y) for a, x, y in points if x is not None and y is not None]
    if not points:
        return False
    figure, axes, colors = new_plot()
    centres: dict[str, tuple[float, float]] = {}
    for i, row, xs, ys in arm_groups(rows, points):
        color = colors[i % len(colors)]
        axes.scatter(xs, ys, s=14, color=color, alpha=0.5)
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        centres[row.arm] = (mx, my)
        source = conversions.get(row.arm)
        axes.errorbar(
            mx,
            my,
            yerr=[[my - min(ys)], [max(ys) - my]],
            fmt="s" if row.arm == reference else "^" if source else "D",
            markersize=8,
            color=color,
            capsize=3,
            label=f"{row.arm} (n={len(xs)}{f', from {source}' if source else ''})",
        )
        if row.arm == reference:
            axes.axhline(my, color=color, linestyle="--", linewidth=1)
            axes.axhline(my * 1.02, color=color, linestyle=":", linewidth=1)
    for arm, control in matched.items():
        if arm in centres and control in centres and centres[arm] != centres[control]:
            axes.annotate(
                "",
                xy=centres[arm],
                xytext=centres[control],
                arrowprops={"arrowstyle": "->", "color": "black", "linewidth": 0.8},
            )
    front = front_points(rows, controls, reference)
    if front:
        xs = [x / 1e6 for x, _ in front]
        ys = [y for _, y in front]
        right = max(x for _, x, _ in points)
        axes.step(
            [*xs, max(right, xs[-1])],
            [*ys, ys[-1]],
            where="post",
            color="grey",
            linewidth=1.2,
            label="hand-made front",
        )
        # The front as the matched arms' training would move it (each point times the
        # matched arm's perplexity over the reference's): the line a conversion must
        # lie below, as the table's ratio comparison reads it.
        scaled_by = sorted(set(matched.values()) & centres.keys()) if reference in centres else []
        for control in scaled_by:
            scale = centres[control][1] / centres[reference][1]
            axes.step(
                [*xs, max(right, xs[-1])],
                [y * scale for y in [*ys, ys[-1]]],
                where="post",
                color="grey",
                linewidth=1.0,
                linestyle="--",
                label=f"hand-made front x {control}/{reference} ({scale:.3f})",
            )
    axes.set_xlabel("forward MFLOPs per token (blocks and output layer)")
    axes.set_ylabel("validation perplexity (exact)")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="best")
    save_plot(figure, path)
    return True


def new_plot() -> tuple[Any, Any, list[str]]:
    """A report plot's figure and axes (matplotlib without a display) and its colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    return figure, axes, plt.rcParams["axes.prop_cycle"].by_key()["color"]


def save_plot(figure: Any, path: Path) -> None:
    """Writes `figure` to `path` (aside, then renamed: never a half-written PNG) and
    closes it."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=120)
    plt.close(figure)
