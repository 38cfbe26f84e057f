"""Draws the README's "Does PAR pay?" plot from the three-seed means it quotes.

    python scripts/plot_par_answer.py                 # writes docs/images/par_answer_cpu.png
    python scripts/plot_par_answer.py --out FILE.png

Every figure below is copied from the table "The three seeds together" in docs/search.md
(the README's table quotes the same rows): TensorFlow 2.21.0 / Keras 3.15.1 on 2-core CPUs,
commit c7b009c, validation perplexity (exact) as the mean and min-max over seeds 0, 1 and
2, forward MFLOPs per token. Nothing is read from a study folder, so the plot can be
redrawn anywhere; change a figure here only with the docs it comes from.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "images" / "par_answer_cpu.png"


@dataclass(frozen=True)
class Arm:
    """One row of the table: an arm's three-seed mean and range."""

    name: str
    kind: str  # "reference", "hand-made", "searched", "control" or "conversion"
    mflops: float  # mean forward MFLOPs per token
    mflops_range: tuple[float, float]  # min-max over the seeds (equal for a fixed model)
    valid: float  # mean validation perplexity
    valid_range: tuple[float, float]  # min-max over the seeds


# Source of every row: docs/search.md, "The three seeds together", the row named in each
# comment (README.md, "Does PAR pay?", quotes the same figures).
ARMS = [
    # row "txl: `A D A D A D`": 2.951, 53.29 (52.98-53.57)
    Arm("txl", "reference", 2.951, (2.951, 2.951), 53.29, (52.98, 53.57)),
    # row "txl4: `A D A D`": 2.091, 54.27 (54.12-54.38)
    Arm("txl4", "hand-made", 2.091, (2.091, 2.091), 54.27, (54.12, 54.38)),
    # row "txl2: `A D`": 1.231, 56.19 (56.00-56.30)
    Arm("txl2", "hand-made", 1.231, (1.231, 1.231), 56.19, (56.00, 56.30)),
    # row "narrow96": 1.949, 58.81 (58.56-59.19)
    Arm("narrow96", "hand-made", 1.949, (1.949, 1.949), 58.81, (58.56, 59.19)),
    # row "narrow80": 1.514, 62.45 (61.59-62.94)
    Arm("narrow80", "hand-made", 1.514, (1.514, 1.514), 62.45, (61.59, 62.94)),
    # row "hybrid": 2.116, 60.06 (59.89-60.30)
    Arm("hybrid", "hand-made", 2.116, (2.116, 2.116), 60.06, (59.89, 60.30)),
    # row "cost05, stage 2": 1.692 (1.493-2.091), 55.48 (54.12-56.38)
    Arm("cost05, stage 2", "searched", 1.692, (1.493, 2.091), 55.48, (54.12, 56.38)),
    # row "cost03, stage 2": 1.979 (1.755-2.091), 54.82 (54.12-55.95)
    Arm("cost03, stage 2", "searched", 1.979, (1.755, 2.091), 54.82, (54.12, 55.95)),
    # row "txl_ft": 2.951, 50.92 (50.56-51.17)
    Arm("txl_ft", "control", 2.951, (2.951, 2.951), 50.92, (50.56, 51.17)),
    # row "drop1": 2.353, 52.17 (51.80-52.59)
    Arm("drop1", "conversion", 2.353, (2.353, 2.353), 52.17, (51.80, 52.59)),
    # row "drop2": 1.755, 55.50 (55.06-55.83)
    Arm("drop2", "conversion", 1.755, (1.755, 1.755), 55.50, (55.06, 55.83)),
]

# The hand-made front: the reference and the shallower Transformer-XLs, the best hand-made
# models at their FLOPs (the narrowed and hybrid models lie above it).
FRONT = ("txl2", "txl4", "txl")

STYLE = {  # kind -> (marker, colour, legend label)
    "reference": ("s", "black", "Transformer-XL (reference), 6 epochs"),
    "hand-made": ("s", "tab:grey", "hand-made from scratch, 6 epochs"),
    "searched": ("o", "tab:blue", "PAR search's stage 2, 6 epochs"),
    "control": ("^", "tab:green", "txl_ft: Transformer-XL, 7 epochs"),
    "conversion": ("^", "tab:red", "conversion of a trained Transformer-XL, 7 epochs"),
}


# Where each arm's name goes, in points from its marker, so that no two names overlap.
LABEL_OFFSET = {"cost05, stage 2": (-40, 10), "drop2": (6, -14), "txl_ft": (7, -12)}


def front_steps(
    arms: dict[str, Arm], scale: float, right: float
) -> tuple[list[float], list[float]]:
    """The front as a step line: at each FLOPs, the best front model at or below it."""
    points = sorted((arms[name].mflops, arms[name].valid * scale) for name in FRONT)
    xs = [x for x, _ in points] + [right]
    ys = [y for _, y in points] + [points[-1][1]]
    return xs, ys


def draw(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = {arm.name: arm for arm in ARMS}
    right = 3.1
    fig, ax = plt.subplots(figsize=(9, 7.5), dpi=110)

    xs, ys = front_steps(arms, 1.0, right)
    ax.step(
        xs,
        ys,
        where="post",
        color="tab:grey",
        linewidth=1.5,
        zorder=1,
        label="hand-made front (txl2, txl4, txl), 6 epochs",
    )
    front = sorted((arms[name].mflops, arms[name].valid) for name in FRONT)
    ax.plot(
        [x for x, _ in front],
        [y for _, y in front],
        color="tab:grey",
        linewidth=1,
        linestyle=":",
        zorder=1,
        label="straight lines between the front's models (for a mean over architectures)",
    )
    scale = arms["txl_ft"].valid / arms["txl"].valid
    xs, ys = front_steps(arms, scale, right)
    ax.step(
        xs,
        ys,
        where="post",
        color="tab:grey",
        linewidth=1.2,
        linestyle="--",
        zorder=1,
        label=f"front scaled by txl_ft / txl ({scale:.3f}): a conversion pays below it",
    )

    labelled: set[str] = set()
    for arm in ARMS:
        marker, colour, label = STYLE[arm.kind]
        xerr = [[arm.mflops - arm.mflops_range[0]], [arm.mflops_range[1] - arm.mflops]]
        yerr = [[arm.valid - arm.valid_range[0]], [arm.valid_range[1] - arm.valid]]
        ax.errorbar(
            arm.mflops,
            arm.valid,
            xerr=xerr,
            yerr=yerr,
            fmt=marker,
            color=colour,
            markersize=8,
            capsize=3,
            elinewidth=1,
            zorder=3,
            label=None if arm.kind in labelled else label,
        )
        labelled.add(arm.kind)
        ax.annotate(
            arm.name,
            (arm.mflops, arm.valid),
            textcoords="offset points",
            xytext=LABEL_OFFSET.get(arm.name, (7, 5)),
            fontsize=9,
            color=colour,
        )

    ax.set_xlabel("forward MFLOPs per token (blocks and output layer)")
    ax.set_ylabel("validation perplexity (exact), mean of seeds 0, 1, 2")
    ax.set_title(
        "Does PAR pay at 256 tokens? Three-seed means, bars min-max\n"
        "TensorFlow 2.21.0 on 2-core CPUs, commit c7b009c (docs/search.md)",
        fontsize=11,
    )
    ax.set_xlim(1.1, right)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8.5)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the PNG to write")
    args = parser.parse_args(argv)
    draw(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
