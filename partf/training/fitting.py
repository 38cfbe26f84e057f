"""The training itself: `fit` over the rest of the run, with partf's callbacks.

- `make_callbacks(...) -> RunCallbacks`: the callbacks of `partf.training.callbacks`,
  built for one run and kept by role, so the trainer can ask the ones it needs
  afterwards (the checkpointer, the validation) and collect why the run stopped.
- `plan_segments(start, B, total) -> [Segment]`: the `fit` calls, whole epochs where
  possible; a resumed run first finishes its epoch, skipping the batches consumed.
- `run_fit(...) -> history`: one `fit` per segment, until the end or a stop.

With `--objective=mlm` (`data.masking` set) each segment is one epoch, so that each
`fit` call's batches can be masked with seeds of their own global steps: fresh masks
every step, the same ones after a resume (partf.data.masking).

On the JAX backend the training split is numpy batches (`ArrayBatches`): each segment's
batches go to `fit` as rows, `batch_size=B`, unshuffled, which `fit` cuts back into the
same batches in the same order (no `tf.data`, no TensorFlow).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras

from partf.training.callbacks import (
    Checkpointer,
    MemoryReset,
    MetricsLogger,
    PiPlotter,
    ProgressTracker,
    RunProgress,
    Segment,
    SignalWatch,
    SpikeMonitor,
    StopReason,
    ValidationCallback,
    first_stop,
)
from partf.training.config import TrainConfig
from partf.training.distribution import distribute_rows
from partf.training.paths import RunPaths
from partf.training.splits import RunData
from partf.training.state import Built, CheckpointWriter, Resumed
from partf.training.summaries import open_writer

if TYPE_CHECKING:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Writers:
    """The run's TensorBoard writers: logs/<model_name>/train and .../valid
    (`partf.training.summaries.open_writer`: `tf.summary`'s on TensorFlow)."""

    train: Any
    valid: Any

    @classmethod
    def open(cls, logs: Path) -> Writers:
        """Creates both writers under `logs`."""
        return cls(open_writer(logs / "train"), open_writer(logs / "valid"))

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
        """Why the run stopped early, asked of the callbacks then of the signal watch.

        Args:
            step: where the run is (a signal's reason is placed there).

        Returns:
            A spike, then a NaN loss, then a signal; None when the run went to its end.
        """
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
    """partf's callbacks for a run (see `partf.training.callbacks`), and their writers.

    Args:
        config: the run's settings (the every-N-steps intervals).
        paths: where the TensorBoard logs and the pi heatmaps go.
        built: the model's schedule and spike guard.
        data: the validation split, if any.
        progress: the run's position, shared by the callbacks.
        evaluator: scores the validation split.
        resumed: the restored running-loss sums and checkpoint.
        save: writes a checkpoint.
        while_frozen: a search's evaluator for validations while pi is frozen
            (`partf.training.evaluation.block_weights.expected_evaluator`), or None.

    Returns:
        The `RunCallbacks`.
    """
    writers = Writers.open(paths.logs)
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
    if built.guard is not None:
        spike = SpikeMonitor(progress, writers.train, built.guard, config.log_every)
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


def plan_segments(start_step: int, batches_per_epoch: int, total_steps: int) -> list[Segment]:
    """Splits the rest of a run into `fit` calls with whole epochs where possible.

    A run resumed in the middle of an epoch first finishes that epoch (skipping the
    batches already consumed); a run cut by max_steps ends with a partial epoch.

    Args:
        start_step: updates already done.
        batches_per_epoch: B.
        total_steps: updates the run makes in all.

    Returns:
        Segments covering steps [start_step, total_steps) in order.
    """
    segments = []
    step = start_step
    while step < total_steps:
        epoch, skip = divmod(step, batches_per_epoch)
        limit = min(batches_per_epoch, total_steps - epoch * batches_per_epoch)
        if skip == 0 and limit == batches_per_epoch:
            full_epochs = (total_steps - step) // batches_per_epoch
            segments.append(Segment(epoch, epoch + full_epochs, 0, batches_per_epoch))
            step += full_epochs * batches_per_epoch
        else:
            segments.append(Segment(epoch, epoch + 1, skip, limit))
            step = epoch * batches_per_epoch + limit
    return segments


def one_epoch_each(segments: Sequence[Segment]) -> list[Segment]:
    """`segments` with every multi-epoch segment cut into one segment per epoch."""
    return [
        Segment(epoch, epoch + 1, segment.skip, segment.limit)
        for segment in segments
        for epoch in range(segment.initial_epoch, segment.epochs)
    ]


def run_fit(
    model: keras.Model,
    data: RunData,
    progress: RunProgress,
    callbacks: Sequence[keras.callbacks.Callback],
    strategy: tf.distribute.Strategy | None,
) -> dict[str, list[float]]:
    """Trains from `progress.global_step` to the end: one `fit` call per segment.

    Args:
        model: the compiled model.
        data: the training split and the run's length.
        progress: the run's position (where it starts; the callbacks keep it current).
        callbacks: every callback of the run, partf's first.
        strategy: the run's strategy, or None.

    Returns:
        The `fit` histories joined (e.g. "loss": one value per epoch done).
    """
    history: dict[str, list[float]] = {}
    segments = plan_segments(progress.global_step, data.batches_per_epoch, data.total_steps)
    if data.masking is not None:
        segments = one_epoch_each(segments)
    on_tensorflow = keras.backend.backend() == "tensorflow"
    if on_tensorflow:
        import tensorflow as tf

        train_data = data.train.dataset.cache()
    for segment in segments:
        progress.begin(segment)
        arguments: dict[str, Any] = {}
        if on_tensorflow:
            batches = train_data.skip(segment.skip).take(segment.limit - segment.skip)
            if data.masking is not None:
                first_step = segment.initial_epoch * data.batches_per_epoch + segment.skip
                batches = data.masking.training_batches(batches, first_step)
            batches = batches.prefetch(tf.data.AUTOTUNE)
            arguments["x"] = distribute_rows(strategy, batches, data.train.batch_size)
        else:
            # Numpy rows; batch_size B and no shuffling give back the records' batches.
            arguments["x"], arguments["y"] = data.train.dataset.rows(segment.skip, segment.limit)
            arguments["batch_size"] = data.train.batch_size
        fit = model.fit(
            **arguments,
            initial_epoch=segment.initial_epoch,
            epochs=segment.epochs,
            callbacks=list(callbacks),
            shuffle=False,
            verbose=1 if os.isatty(1) else 2,
        )
        for key, values in fit.history.items():
            history.setdefault(key, []).extend(values)
        if model.stop_training:
            break
    return history
