"""What MetricsLogger writes besides the loss: the search's expected cost and Primal's
KSVD term, each under its own TensorBoard tag; and PiPlotter's heatmap at a run's end."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from partf.models import PARTransformerXL
from partf.models.cost import expected_flops
from partf.training.callbacks.monitoring import MetricsLogger, PiPlotter
from partf.training.run_state import RunProgress


@pytest.fixture(scope="module")
def model():
    return PARTransformerXL(
        vocab_size=40, d_model=16, num_heads=2, d_ffn=32, num_layers=2, mem_len=4,
        cutoffs=(), batch_size=2,
    )  # fmt: skip


def _logged(tmp_path, model, logs, seq_len):
    writer = tf.summary.create_file_writer(str(tmp_path))
    logger = MetricsLogger(RunProgress(10, 100, 16), writer, lambda step: 1e-3, 1, seq_len)
    logger.set_model(model)
    logger.on_interval(5, logs)
    writer.flush()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    return {tag: float(tf.make_ndarray(events.Tensors(tag)[-1].tensor_proto))
            for tag in events.Tags()["tensors"]}  # fmt: skip


def test_expected_cost_and_ksvd_loss_are_logged(tmp_path, model):
    rng = np.random.default_rng(0)
    for block in model.blocks:
        block.arch_logits.assign(rng.normal(size=3).astype("float32"))
    scalars = _logged(tmp_path, model, {"loss": 3.0, "ksvd_loss": 0.25}, seq_len=8)
    assert scalars["ksvd_loss"] == pytest.approx(0.25)
    want = float(expected_flops(model, 8))
    assert scalars["search/expected_cost"] == pytest.approx(want, rel=1e-5)


def test_nothing_extra_without_them(tmp_path, model):
    scalars = _logged(tmp_path, model, {"loss": 3.0}, seq_len=None)
    assert "ksvd_loss" not in scalars and "search/expected_cost" not in scalars
    assert scalars["loss"] == pytest.approx(3.0)


def _images(folder) -> list[int]:
    events = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    return [e.step for e in events.Tensors("pi")] if "pi" in events.Tags()["tensors"] else []


def test_a_run_ending_between_plots_gets_its_heatmap(tmp_path, model):
    """A run shorter than plot_every (a --max_steps run) still has a pi heatmap in
    TensorBoard and plots/ at its last step; a run ending on a plot gets no second one."""
    progress = RunProgress(100, 300, 16)
    writer = tf.summary.create_file_writer(str(tmp_path / "logs"))
    plotter = PiPlotter(progress, writer, tmp_path / "plots", plot_every=1000)
    plotter.set_model(model)
    progress.move_to(200)  # an epoch's `fit` ends: not the run's end, no picture
    plotter.on_train_end()
    progress.move_to(300)
    plotter.on_train_end()
    writer.flush()
    assert _images(tmp_path / "logs") == [300]
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["step300.png"]
    # A picture already taken at the last step is not taken again.
    plotter.on_train_end()
    writer.flush()
    assert _images(tmp_path / "logs") == [300]
