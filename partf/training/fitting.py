"""The training itself: `plan_segments` cuts the rest of a run into `fit` calls (whole
epochs where possible; a resumed run first finishes its epoch) and `run_fit` runs them
with partf's callbacks.

With `--objective=mlm` each segment is one epoch, so that each `fit` call's batches are
masked with seeds of their own global steps (fresh masks every step, the same after a
resume). On JAX the split is numpy batches given to `fit` unshuffled with
`batch_size=B`, which cuts them back into the same batches in the same order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import keras

from partf.training.distribution import distribute_rows
from partf.training.run_state import RunProgress, Segment
from partf.training.splits import RunData

if TYPE_CHECKING:
    import tensorflow as tf


def plan_segments(start_step: int, batches_per_epoch: int, total_steps: int) -> list[Segment]:
    """Segments covering steps [start_step, total_steps) in order: `fit` calls with whole
    epochs where possible. A run resumed in the middle of an epoch first finishes that
    epoch (skipping the batches already consumed); a run cut by max_steps ends with a
    partial epoch.
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
    """Trains from `progress.global_step` to the end, one `fit` call per segment, and
    returns the `fit` histories joined (e.g. "loss": one value per epoch done)."""
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
