"""Callbacks on their own: host-side step counting, memory resets, every-N-steps, NaN
stop, signals, checkpoints, and the outcomes they hand back."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from partf.training.callbacks.checkpointer import Checkpointer
from partf.training.callbacks.memory_reset import MemoryReset
from partf.training.callbacks.monitoring import MetricsLogger
from partf.training.callbacks.progress import EveryNSteps, ProgressTracker, first_stop
from partf.training.run_state import RunProgress, Segment, StopReason
from partf.training.signals import SignalWatch


class FakeModel:
    """The few model attributes the callbacks use."""

    candidate_names = ["attention", "dense", "identity"]

    def __init__(self):
        self.stop_training = False
        self.resets = []

    def reset_state(self, which="all"):
        self.resets.append(which)

    def tau(self):
        return np.float32(0.5)

    def pi(self):
        return np.full((2, 3), 1 / 3, np.float32)


def _attach(callback, model):
    callback.set_model(model)
    return callback


def _fit(callbacks, segment, progress, steps_per_execution, losses=None):
    """Drives callbacks the way Model.fit does for one segment."""
    progress.segment = segment
    for callback in callbacks:
        callback.on_train_begin()
    for epoch in range(segment.initial_epoch, segment.epochs):
        for callback in callbacks:
            callback.on_epoch_begin(epoch)
        for begin in range(0, segment.limit - segment.skip, steps_per_execution):
            logs = {"loss": (losses or {}).get(begin, 1.0)}
            for callback in callbacks:
                callback.on_train_batch_end(begin + steps_per_execution - 1, logs)
            if any(c.model.stop_training for c in callbacks):
                break
        for callback in callbacks:
            callback.on_epoch_end(epoch, {"loss": 1.0})
        if any(c.model.stop_training for c in callbacks):
            break


def test_steps_are_counted_on_the_host_and_memory_resets_at_epoch_starts():
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=10, total_steps=30, tokens_per_batch=4)
    seen = []

    class Record(ProgressTracker):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            seen.append(progress.global_step)

    callbacks = [_attach(Record(progress), model), _attach(MemoryReset(progress), model)]
    # Resumed at step 14: the rest of epoch 1 (a short last execution), then epoch 2.
    _fit(callbacks, Segment(1, 2, 4, 10), progress, steps_per_execution=4)
    assert seen == [18, 20] and model.resets == []  # mid-epoch resume keeps the memory
    _fit(callbacks, Segment(2, 3, 0, 10), progress, steps_per_execution=4)
    assert seen == [18, 20, 24, 28, 30] and model.resets == ["train"]


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
        _attach(ProgressTracker(progress), model),
        _attach(metrics, model),
        _attach(checkpointer, model),
    ]
    _fit(callbacks, Segment(0, 1, 0, 8), progress, 2, losses={0: 2.0, 2: math.nan})
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
        _attach(Interrupt(progress), model),
        _attach(Checkpointer(progress, _saver(saved), signals=signals), model),
    ]
    _fit(callbacks, Segment(0, 1, 0, 8), progress, 2)
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
    callbacks = [_attach(ProgressTracker(progress), model), _attach(checkpointer, model)]
    _fit(callbacks, Segment(0, 1, 0, 8), progress, 2)
    assert saved == [4, 6] and model.stop_training and progress.global_step == 6


@pytest.mark.parametrize(("every", "expected"), [(0, [8]), (3, [4, 6, 8]), (8, [8])])
def test_checkpoints_every_n_steps_and_at_epoch_end(every, expected):
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=8, total_steps=8, tokens_per_batch=4)
    saved = []
    callbacks = [
        _attach(ProgressTracker(progress), model),
        _attach(Checkpointer(progress, _saver(saved), every), model),
    ]
    _fit(callbacks, Segment(0, 1, 0, 8), progress, 2)
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
    callbacks = [_attach(Ticking(progress), model), _attach(checkpointer, model)]
    _fit(callbacks, Segment(0, 1, 0, 16), progress, 2)
    # Due every 2 steps (10 s); saved at 30 s (step 6), 60 s (12) and the epoch end (16).
    assert saved == [6, 12, 16]
    # Without the limit, the same run saves at every multiple of 2.
    saved.clear()
    progress = RunProgress(batches_per_epoch=16, total_steps=16, tokens_per_batch=4)
    callbacks = [
        _attach(Ticking(progress), model),
        _attach(Checkpointer(progress, _saver(saved), 2, clock=clock), model),
    ]
    _fit(callbacks, Segment(0, 1, 0, 16), progress, 2)
    assert saved == [2, 4, 6, 8, 10, 12, 14, 16]


def test_every_n_steps_fires_at_the_first_execution_end_past_each_multiple():
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=10, total_steps=30, tokens_per_batch=4)
    seen = []

    class Every5(EveryNSteps):
        def on_interval(self, step, logs):
            seen.append(step)

    callbacks = [_attach(ProgressTracker(progress), model), _attach(Every5(progress, 5), model)]
    # Resumed at step 14 with 4 steps per execution: ends at 18, 20, then 24, 28, 30.
    _fit(callbacks, Segment(1, 2, 4, 10), progress, steps_per_execution=4)
    _fit(callbacks, Segment(2, 3, 0, 10), progress, steps_per_execution=4)
    assert seen == [18, 20, 28, 30]


def test_the_highest_ranked_stop_reason_is_reported():
    class Stopped:
        def __init__(self, outcome):
            self.outcome = outcome

    nan, spike = StopReason("non_finite", 6), StopReason("spike", 8)
    assert first_stop([Stopped(None), Stopped(nan), Stopped(spike)]) == spike
    assert first_stop([Stopped(nan), object()]) == nan
    assert first_stop([Stopped(None)]) is None
