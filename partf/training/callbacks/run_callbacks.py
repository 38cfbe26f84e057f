"""partf's callbacks for one run, built together and kept by role.

`make_callbacks(...) -> RunCallbacks` builds the callbacks of `partf.training.callbacks`
for one run, with the TensorBoard writers they write to, so the trainer can ask the ones
it needs afterwards (the checkpointer, the validation) and collect why the run stopped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras

from partf.training.build import Built
from partf.training.callbacks.checkpointer import Checkpointer
from partf.training.callbacks.memory_reset import MemoryReset
from partf.training.callbacks.monitoring import (
    MetricsLogger,
    PiPlotter,
    SpikeMonitor,
    ValidationCallback,
)
from partf.training.callbacks.progress import ProgressTracker, first_stop
from partf.training.checkpoint import CheckpointWriter, Resumed
from partf.training.config import TrainConfig
from partf.training.paths import RunPaths
from partf.training.run_state import RunProgress, StopReason
from partf.training.signals import SignalWatch
from partf.training.splits import RunData
from partf.training.summaries import open_writer


@dataclasses.dataclass(frozen=True)
class Writers:
    """The run's TensorBoard writers: logs/<model_name>/train and .../valid
    (`partf.training.summaries.open_writer`: `tf.summary`'s on TensorFlow)."""

    train: Any
    valid: Any

    def flush(self) -> None:
        self.train.flush()
        self.valid.flush()


@dataclasses.dataclass(frozen=True)
class RunCallbacks:
    """partf's callbacks for one run, by role, with the TensorBoard writers they write to
    and the signal watch the Checkpointer asks.

    `fit` gets `as_list()`, in the order `partf.training.callbacks` explains; once it has
    returned, `stop_reason` says why the run stopped early, if it did.
    """

    tracker: ProgressTracker
    spike: SpikeMonitor | None
    memory: MemoryReset
    metrics: MetricsLogger
    plotter: PiPlotter
    validation: ValidationCallback | None
    checkpointer: Checkpointer
    writers: Writers
    signals: SignalWatch

    def as_list(self) -> list[keras.callbacks.Callback]:
        """The callbacks, in the order `fit` must run them."""
        ordered = (
            self.tracker,
            self.spike,
            self.memory,
            self.metrics,
            self.plotter,
            self.validation,
            self.checkpointer,
        )
        return [c for c in ordered if c is not None]

    def stop_reason(self, step: int) -> StopReason | None:
        """Why the run stopped early (a spike, then a NaN loss, then a signal at `step`),
        asked of the callbacks then of the signal watch; None when it went to its end."""
        return first_stop(self.as_list()) or self.signals.stop_reason(step)


def make_callbacks(
    config: TrainConfig,
    paths: RunPaths,
    built: Built,
    data: RunData,
    progress: RunProgress,
    evaluator: Any,
    resumed: Resumed,
    save: CheckpointWriter,
    while_frozen: Any = None,
) -> RunCallbacks:
    """partf's callbacks for a run (see `partf.training.callbacks`), and their writers;
    `while_frozen` is a search's evaluator for validations while pi is frozen
    (`partf.training.evaluation.block_weights.expected_evaluator`), or None."""
    writers = Writers(open_writer(paths.logs / "train"), open_writer(paths.logs / "valid"))
    signals = SignalWatch()
    validation = None
    if data.valid is not None:
        validation = ValidationCallback(
            progress,
            writers.valid,
            evaluator,
            data.valid.dataset,
            config.eval_every,
            data.valid.text_counts,
            frozen_until=config.arch_settings(data.total_steps).freeze_steps if while_frozen else 0,
            while_frozen=while_frozen,
            num_batches=data.valid.num_batches,
        )
    spike = None
    if built.model.spike_guard is not None:
        spike = SpikeMonitor(progress, writers.train, built.model.spike_guard, config.log_every)
    return RunCallbacks(
        tracker=ProgressTracker(progress, resumed.metrics),
        spike=spike,
        memory=MemoryReset(progress),
        metrics=MetricsLogger(
            progress,
            writers.train,
            built.schedule.value_at,
            config.log_every,
            # The search's expected cost (none for the encoder of --objective=mlm).
            seq_len=None if data.masking is not None else data.train.seq_len,
        ),
        plotter=PiPlotter(progress, writers.train, paths.plots, config.plot_every),
        validation=validation,
        checkpointer=Checkpointer(
            progress,
            save,
            config.ckpt_every,
            signals,
            resumed.checkpoint,
            min_seconds=config.ckpt_min_seconds,
        ),
        writers=writers,
        signals=signals,
    )
