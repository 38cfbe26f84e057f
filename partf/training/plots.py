"""Pictures of the architecture distribution pi: a heatmap per snapshot, a GIF of the run.

The heatmap has one column per stochastic block and one row per candidate layer type;
darker is more probable, and the probability of the most likely type is written in each
column (as in the original project's `visualize_pi_weights`). Figures are drawn with
matplotlib's non-interactive Agg backend, so plotting needs no display.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from partf.atomic import atomic_write_bytes

_FRAME = re.compile(r"^step(\d+)\.png$")


def pi_heatmap_png(pi: np.ndarray, candidate_names: Sequence[str], title: str = "") -> bytes:
    """The PNG bytes of pi, [num_blocks, num_candidates] probabilities (rows sum to one),
    one column per name of `candidate_names`."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    pi = np.asarray(pi, dtype=np.float64)
    if pi.ndim != 2 or pi.shape[1] != len(candidate_names):
        raise ValueError(
            f"pi must be [blocks, {len(candidate_names)}] to match the candidate names, "
            f"got shape {pi.shape}."
        )
    num_blocks, num_candidates = pi.shape
    weights = pi.T  # [candidates, blocks]: one column per block
    fig = Figure(figsize=(max(4.0, 1.1 * num_blocks + 2.5), 1.0 + 0.8 * num_candidates))
    ax = fig.add_subplot()
    ax.matshow(weights, cmap="binary", vmin=0.0, vmax=1.0)
    ax.set_yticks(range(num_candidates))
    ax.set_yticklabels([name.capitalize() for name in candidate_names])
    ax.set_xticks(range(num_blocks))
    ax.set_xticklabels(range(1, num_blocks + 1))
    ax.xaxis.set_ticks_position("bottom")
    ax.set_xlabel("Stochastic block")
    ax.set_ylabel("Layer type")
    if title:
        ax.set_title(title)
    for block, best in enumerate(np.argmax(weights, axis=0)):
        ax.text(
            block,
            best,
            f"{weights[best, block]:.2f}",
            ha="center",
            va="center",
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.3"},
        )
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    return buffer.getvalue()


def save_pi_heatmap(
    pi: np.ndarray,
    candidate_names: Sequence[str],
    path: str | os.PathLike,
    title: str = "",
) -> bytes:
    """Writes the pi heatmap to `path` (atomically) and returns the PNG bytes."""
    png = pi_heatmap_png(pi, candidate_names, title)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, png)
    return png


def frame_paths(folder: str | os.PathLike) -> list[Path]:
    """The `step<N>.png` frames in `folder`, in step order."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    frames = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _FRAME.match(p.name))]
    return [path for _, path in sorted(frames)]


def make_gif(folder: str | os.PathLike, out_path: str | os.PathLike, ms_per_frame: int = 400):
    """Animates the `step<N>.png` frames of `folder` into a looping GIF at `out_path`,
    frames of different sizes padded onto the largest canvas; returns the number of
    frames, 0 (and no file) when there are none."""
    from PIL import Image

    paths = frame_paths(folder)
    if not paths:
        return 0
    images = []
    for path in paths:
        with Image.open(path) as image:
            images.append(image.convert("RGB"))
    width = max(image.width for image in images)
    height = max(image.height for image in images)
    frames = []
    for image in images:
        canvas = Image.new("RGB", (width, height), "white")
        canvas.paste(image, (0, 0))
        frames.append(canvas)
    buffer = io.BytesIO()
    frames[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=frames[1:],
        duration=ms_per_frame,
        loop=0,
    )
    atomic_write_bytes(out_path, buffer.getvalue())
    return len(frames)
