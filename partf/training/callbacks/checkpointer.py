"""Checkpoints during a run: `Checkpointer` saves every N steps, at epoch ends and on
SIGINT/SIGTERM, which `SignalWatch` (partf.training.signals) records.

The callback only decides when: `save` (partf.training.checkpoint.CheckpointWriter)
writes, and what it wrote is a `SavedCheckpoint`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from partf.training.callbacks.progress import EveryNSteps, RunStopper
from partf.training.checkpoint import SavedCheckpoint
from partf.training.run_state import RunProgress, StopReason, read_loss
from partf.training.signals import SignalWatch

logger = logging.getLogger("partf.training")


class Checkpointer(EveryNSteps, RunStopper):
    """Saves a checkpoint every `ckpt_every` steps, at each epoch end, and on SIGINT/SIGTERM.

    A checkpoint is written only after the running loss reads back finite, so the newest
    checkpoint is always a good one; a non-finite loss stops the run (`outcome`
    "non_finite"). On a signal (`signals`, asked at every execution end) it saves and
    stops training. `save`: (step, running training loss) -> path, writes one checkpoint;
    `newest`: the newest checkpoint written or resumed from, or None.

    A `ckpt_every` checkpoint is skipped while the previous save of this run is younger
    than `min_seconds` (0: never), so a plan's interval that suits a CPU does not save
    every second on a GPU. Epoch ends and signals save regardless.
    """

    def __init__(
        self,
        progress: RunProgress,
        save: Callable[[int, float | None], str],
        ckpt_every: int = 0,
        signals: SignalWatch | None = None,
        newest: SavedCheckpoint | None = None,
        min_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(progress, ckpt_every)
        self.save = save
        self.signals = signals
        self.newest = newest
        self.min_seconds = float(min_seconds)
        self.clock = clock
        self._saved_at = clock()  # the run's start counts as a save: nothing to lose yet
        self._loss: float | None = None  # the running loss last read
        self._stopping = False  # a signal was seen at this execution end

    @property
    def last_checkpoint(self) -> str | None:
        """The newest checkpoint's path, or None."""
        return self.newest.path if self.newest else None

    def due(self, previous: int, step: int) -> bool:
        # The signal is read once per execution end: one that lands during the save below
        # is handled at the next execution end (a checkpoint there, then the stop).
        self._stopping = self.signals is not None and self.signals.received is not None
        if self._stopping:
            return True
        recent = self.clock() - self._saved_at < self.min_seconds
        return super().due(previous, step) and not recent

    def on_interval(self, step: int, logs: dict[str, Any] | None) -> None:
        self._save_if_finite(step, logs)
        if self._stopping:
            self.model.stop_training = True

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if not self.model.stop_training:  # a stop has already saved (signal) or must not
            self._save_if_finite(self.progress.global_step, logs)

    def _save_if_finite(self, step: int, logs: dict[str, Any] | None) -> None:
        loss = read_loss(logs)
        if loss is not None:
            self._loss = loss
        if loss is not None and not math.isfinite(loss):
            # A run already stopping has had its NaN reported by MetricsLogger, which
            # reads the same loss before this callback; say it once.
            if not self.model.stop_training:
                logger.error("loss is %s at step %d: stopping without a checkpoint.", loss, step)
            self.stop_run(StopReason("non_finite", step))
            return
        if self.newest is not None and self.newest.step == step:
            return  # already saved at this step
        self.newest = SavedCheckpoint(step, self.save(step, self._loss))
        self._saved_at = self.clock()
        logger.info("checkpoint at step %d: %s", step, self.newest.path)
