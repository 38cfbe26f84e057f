"""Everything around the compiled train step, as Keras callbacks.

The train step itself (forward, loss, gradients, update, XL memory, tau) runs inside
`fit`'s compiled function, `steps_per_execution` steps per call. Callbacks run between
calls, on the host, and read device values only when they have something to do (every
`log_every` steps, at checkpoints, at epoch ends), so there is no host sync per step.

The trainer installs them in this order (order matters: each reads the position the
tracker has just updated, and the checkpoint comes after the figures of its step):

    ProgressTracker   the run's position (`RunProgress`), counted on the host
    SpikeMonitor      the loss-spike guard's skipped steps (with --spike_guard only)
    MemoryReset       empties the training memory at each epoch start
    MetricsLogger     loss, lr, tau, tokens/s, pi: TensorBoard and training.log
    PiPlotter         pi heatmaps
    ValidationCallback  the validation split (when there is one)
    Checkpointer      checkpoints; saves and stops on SIGINT/SIGTERM

How outcomes come back. A callback keeps what it found out: `Checkpointer.newest` (the
newest checkpoint), `ValidationCallback.report`, `SpikeMonitor.skipped`. A callback that
ends the run early (`RunStopper`: MetricsLogger and Checkpointer on a NaN or Inf loss,
SpikeMonitor on a spike) records a typed `StopReason` in its own `outcome` and sets
`model.stop_training`; after `fit` the trainer asks `first_stop(callbacks)` why the run
stopped. A signal is an outside event, not a callback's finding: `SignalWatch` records it,
the Checkpointer asks it at each execution end, and the trainer asks it afterwards. The
only state the callbacks share is the position, `RunProgress`, written by one of them.

"Every N steps" is `EveryNSteps` (partf.training.progress): the first execution end at or
past each multiple of N.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import keras

from partf.training.monitoring import MetricsLogger, PiPlotter, SpikeMonitor, ValidationCallback
from partf.training.progress import (
    EveryNSteps,
    ProgressTracker,
    RunProgress,
    RunStopper,
    Segment,
    StopReason,
    first_stop,
    read_loss,
)

__all__ = [
    "Checkpointer",
    "EveryNSteps",
    "MemoryReset",
    "MetricsLogger",
    "PiPlotter",
    "ProgressTracker",
    "RunProgress",
    "RunStopper",
    "SavedCheckpoint",
    "Segment",
    "SignalWatch",
    "SpikeMonitor",
    "StopReason",
    "ValidationCallback",
    "first_stop",
    "read_loss",
]

logger = logging.getLogger("partf.training")


class MemoryReset(keras.callbacks.Callback):
    """Empties the training memory when an epoch starts from its first batch.

    A run resumed in the middle of an epoch keeps the memory restored from the checkpoint.

    Args:
        progress: the run's position.
    """

    def __init__(self, progress: RunProgress) -> None:
        super().__init__()
        self.progress = progress

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.progress.step_in_epoch == 0:
            self.model.reset_state("train")


class SignalWatch:
    """Records SIGINT and SIGTERM while `installed()`.

    The first signal asks the run to stop: the `Checkpointer` saves and stops `fit` at
    the next execution end. A second SIGINT aborts at once (KeyboardInterrupt).

    Attributes:
        received: the first signal's number, or None.
    """

    def __init__(self) -> None:
        self.received: int | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[SignalWatch]:
        """Installs the handlers for the block, then puts the previous ones back."""
        previous = {}
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._request_stop)
        except ValueError:  # not the main thread: leave signals alone
            previous = {}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _request_stop(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum
        logger.warning(
            "%s received: saving a checkpoint and stopping after the current steps.",
            signal.Signals(signum).name,
        )

    def stop_reason(self, step: int) -> StopReason | None:
        """The "signal" reason at `step` when a signal arrived, else None."""
        if self.received is None:
            return None
        return StopReason("signal", step, signum=self.received)


@dataclasses.dataclass(frozen=True)
class SavedCheckpoint:
    """A checkpoint on disk: the step it holds and its path."""

    step: int
    path: str


class Checkpointer(EveryNSteps, RunStopper):
    """Saves a checkpoint every `ckpt_every` steps, at each epoch end, and on SIGINT/SIGTERM.

    A checkpoint is written only after the running loss reads back finite, so the newest
    checkpoint is always a good one; a non-finite loss stops the run (`outcome`
    "non_finite"). On a signal it saves and stops training.

    Args:
        progress: the run's position.
        save: (step, running training loss) -> path; writes one checkpoint.
        ckpt_every: steps between checkpoints (0: epoch ends only).
        signals: the run's `SignalWatch`, asked at every execution end.
        newest: the checkpoint the run resumed from, if any.
        min_seconds: a `ckpt_every` checkpoint is skipped while the previous save of this
            run is younger than this (0: never), so a plan's interval that suits a CPU does
            not save every second on a GPU. Epoch ends and signals save regardless.
        clock: seconds, monotonic (a test's fake clock).

    Attributes:
        newest: the newest checkpoint written or resumed from (`SavedCheckpoint`), or None.
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
