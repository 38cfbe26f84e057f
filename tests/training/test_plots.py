"""pi heatmaps and the animated GIF."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from partf.training.plots import frame_paths, make_gif, pi_heatmap_png, save_pi_heatmap

NAMES = ["attention", "dense", "identity"]


def test_heatmap_is_a_png_and_checks_its_shape(tmp_path):
    pi = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
    png = pi_heatmap_png(pi, NAMES, "step 5")
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.width > image.height > 0
    with pytest.raises(ValueError, match=r"pi must be \[blocks, 3\]"):
        pi_heatmap_png(pi[:, :2], NAMES)


def test_gif_has_one_frame_per_step_in_step_order(tmp_path):
    rng = np.random.default_rng(0)
    for step in (1000, 200, 30):
        pi = rng.dirichlet(np.ones(3), size=4)
        save_pi_heatmap(pi, NAMES, tmp_path / f"step{step}.png", f"step {step}")
    (tmp_path / "notes.png").write_bytes(b"")  # not a frame
    assert [p.name for p in frame_paths(tmp_path)] == ["step30.png", "step200.png", "step1000.png"]
    assert make_gif(tmp_path, tmp_path / "pi.gif") == 3
    gif = Image.open(tmp_path / "pi.gif")
    assert gif.format == "GIF" and gif.n_frames == 3
    assert make_gif(tmp_path / "empty", tmp_path / "none.gif") == 0
    assert not (tmp_path / "none.gif").exists()
