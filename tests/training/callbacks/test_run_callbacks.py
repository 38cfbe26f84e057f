"""partf's callbacks for one run (`partf.training.callbacks.run_callbacks`): which are
made for a run's settings, the order `fit` runs them in, and why the run stopped, asked
of them and then of the signal watch."""

from __future__ import annotations

import signal
from types import SimpleNamespace

from partf.training.build import Built
from partf.training.callbacks.checkpointer import Checkpointer
from partf.training.callbacks.memory_reset import MemoryReset
from partf.training.callbacks.monitoring import (
    MetricsLogger,
    PiPlotter,
    SpikeMonitor,
    ValidationCallback,
)
from partf.training.callbacks.progress import ProgressTracker
from partf.training.callbacks.run_callbacks import make_callbacks
from partf.training.checkpoint import Resumed
from partf.training.config import TrainConfig
from partf.training.lr_schedules import WarmupCosine
from partf.training.paths import RunPaths
from partf.training.run_state import RunProgress, StopReason
from partf.training.spike_guard import SpikeGuard
from partf.training.splits import RunData
from tests.training.helpers import VOCAB


def callbacks_for(tmp_path, split, *, guard=None, valid=None, while_frozen=None):
    """make_callbacks for a run of 6 steps on `split` (the validation split: `valid`)."""
    config = TrainConfig(train_directory="records", arch_freeze_steps=3, eval_every=2)
    built = Built(SimpleNamespace(spike_guard=guard), None, WarmupCosine(1e-3, 1, 6), {})
    data = RunData(split, valid, None, VOCAB, total_steps=6)
    progress = RunProgress(split.num_batches, 6, split.batch_size * split.seq_len)
    paths = RunPaths(tmp_path, "m")
    return make_callbacks(
        config, paths, built, data, progress, "evaluator", Resumed(), "save", while_frozen
    )


def test_a_plain_run_gets_no_spike_monitor_and_no_validation(tmp_path, valid_split):
    callbacks = callbacks_for(tmp_path, valid_split)
    assert callbacks.spike is None and callbacks.validation is None
    kinds = [type(c) for c in callbacks.as_list()]
    assert kinds == [ProgressTracker, MemoryReset, MetricsLogger, PiPlotter, Checkpointer]
    assert callbacks.checkpointer.signals is callbacks.signals


def test_a_guard_and_a_validation_split_add_their_callbacks_in_order(tmp_path, valid_split):
    guard = SpikeGuard("skip")
    callbacks = callbacks_for(
        tmp_path, valid_split, guard=guard, valid=valid_split, while_frozen="mixture"
    )
    kinds = [type(c) for c in callbacks.as_list()]
    assert kinds == [
        ProgressTracker,
        SpikeMonitor,
        MemoryReset,
        MetricsLogger,
        PiPlotter,
        ValidationCallback,
        Checkpointer,
    ]
    validation = callbacks.validation
    assert validation.dataset is valid_split.dataset and validation.evaluator == "evaluator"
    # A search's mixture scores the validations while pi is frozen (--arch_freeze_steps).
    assert (validation.frozen_until, validation.while_frozen) == (3, "mixture")
    assert callbacks_for(tmp_path, valid_split, valid=valid_split).validation.frozen_until == 0
    callbacks.writers.flush()
    assert (tmp_path / "logs" / "m" / "train").is_dir()


def test_the_callbacks_stop_reason_comes_before_the_signals(tmp_path, valid_split):
    callbacks = callbacks_for(tmp_path, valid_split, guard=SpikeGuard("stop"))
    assert callbacks.stop_reason(4) is None
    callbacks.signals.received = signal.SIGTERM
    assert callbacks.stop_reason(4) == StopReason("signal", 4, signum=signal.SIGTERM)
    callbacks.spike.outcome = StopReason("spike", 3)
    assert callbacks.stop_reason(4) == StopReason("spike", 3)
