"""Checkpointer on its own: checkpoints every N steps and at epoch ends, none for a
non-finite loss, a signal saves once and stops, and --ckpt_min_seconds."""

from __future__ import annotations

import math

import pytest
import tensorflow as tf

from partf.training.callbacks.checkpointer import Checkpointer
from partf.training.callbacks.monitoring import MetricsLogger
from partf.training.callbacks.progress import ProgressTracker, first_stop
from partf.training.run_state import RunProgress, Segment, StopReason
from partf.training.signals import SignalWatch
from tests.training.callbacks.helpers import FakeModel, attach, fit


def _saver(saved):
    """A Checkpointer `save` that records the steps it was asked to write."""
    return lambda step, loss: saved.append(step) or f"ckpt-{step:08d}.npz"


def test_non_finite_loss_stops_and_no_checkpoint_is_written(tmp_path):
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=8, total_steps=8, tokens_per_batch=4)
    saved = []
    writer = tf.summary.create_file_writer(str(tmp_path))
    metrics = MetricsLogger(progress, writer, lambda step: 1e-3, log_every=4)
    checkpointer = Checkpointer(progress, _saver(saved), 2)
    callbacks = [
        attach(ProgressTracker(progress), model),
        attach(metrics, model),
        attach(checkpointer, model),
    ]
    fit(callbacks, Segment(0, 1, 0, 8), progress, 2, losses={0: 2.0, 2: math.nan})
    assert metrics.outcome == StopReason("non_finite", 4) and model.stop_training
    assert first_stop(callbacks) == StopReason("non_finite", 4)
    assert saved == [2]  # the step-4 checkpoint (loss NaN) was refused
    assert checkpointer.last_checkpoint == "ckpt-00000002.npz"
    assert progress.global_step == 4


def test_signal_saves_once_and_stops():
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=8, total_steps=8, tokens_per_batch=4)
    saved = []
    signals = SignalWatch()

    class Interrupt(ProgressTracker):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if progress.global_step == 2:
                signals.received = 15

    callbacks = [
        attach(Interrupt(progress), model),
        attach(Checkpointer(progress, _saver(saved), signals=signals), model),
    ]
    fit(callbacks, Segment(0, 1, 0, 8), progress, 2)
    assert saved == [2] and model.stop_training
    assert first_stop(callbacks) is None  # a signal is the watch's to report
    assert signals.stop_reason(progress.global_step) == StopReason("signal", 2, signum=15)


def test_a_signal_during_a_save_is_handled_at_the_next_execution_end():
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=8, total_steps=8, tokens_per_batch=4)
    saved = []
    signals = SignalWatch()

    def save(step, loss):
        saved.append(step)
        if step == 4:
            signals.received = 15  # lands while the step-4 checkpoint is written
        return f"ckpt-{step:08d}.npz"

    checkpointer = Checkpointer(progress, save, 4, signals=signals)
    callbacks = [attach(ProgressTracker(progress), model), attach(checkpointer, model)]
    fit(callbacks, Segment(0, 1, 0, 8), progress, 2)
    assert saved == [4, 6] and model.stop_training and progress.global_step == 6


@pytest.mark.parametrize(("every", "expected"), [(0, [8]), (3, [4, 6, 8]), (8, [8])])
def test_checkpoints_every_n_steps_and_at_epoch_end(every, expected):
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=8, total_steps=8, tokens_per_batch=4)
    saved = []
    callbacks = [
        attach(ProgressTracker(progress), model),
        attach(Checkpointer(progress, _saver(saved), every), model),
    ]
    fit(callbacks, Segment(0, 1, 0, 8), progress, 2)
    assert saved == expected


def test_a_step_checkpoint_waits_for_min_seconds_and_epoch_ends_do_not():
    """With `min_seconds`, a --ckpt_every checkpoint is skipped while the last save is
    younger than that; the next one due after it saves, and the epoch end always does."""
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=16, total_steps=16, tokens_per_batch=4)
    saved = []
    now = [0.0]

    def clock():
        return now[0]

    class Ticking(ProgressTracker):
        """Each execution of 2 steps takes 10 s of the fake clock."""

        def on_train_batch_end(self, batch, logs=None):
            now[0] += 10.0
            super().on_train_batch_end(batch, logs)

    checkpointer = Checkpointer(progress, _saver(saved), 2, min_seconds=25.0, clock=clock)
    callbacks = [attach(Ticking(progress), model), attach(checkpointer, model)]
    fit(callbacks, Segment(0, 1, 0, 16), progress, 2)
    # Due every 2 steps (10 s); saved at 30 s (step 6), 60 s (12) and the epoch end (16).
    assert saved == [6, 12, 16]
    # Without the limit, the same run saves at every multiple of 2.
    saved.clear()
    progress = RunProgress(batches_per_epoch=16, total_steps=16, tokens_per_batch=4)
    callbacks = [
        attach(Ticking(progress), model),
        attach(Checkpointer(progress, _saver(saved), 2, clock=clock), model),
    ]
    fit(callbacks, Segment(0, 1, 0, 16), progress, 2)
    assert saved == [2, 4, 6, 8, 10, 12, 14, 16]
