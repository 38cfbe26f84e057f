"""The pieces every partf callback is built from: `ProgressTracker` (the one writer of
`RunProgress`, counted from `fit`'s batch indices), `EveryNSteps` (act at the first
execution end at or past each multiple of N), and `RunStopper` / `first_stop` (a
callback that ends the run keeps why in its own `outcome`, which the trainer asks
once `fit` returns).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import keras

from partf.training.run_state import RunProgress, StopReason

#: When several callbacks stopped the run, the reason reported is the first kind here:
#: the guard's spike step is the most precise, and a NaN loss outranks a signal that
#: happened to arrive too.
_STOP_ORDER = ("spike", "non_finite", "signal")


def first_stop(callbacks: Iterable[Any]) -> StopReason | None:
    """Why the run stopped, asked of the callbacks (those with a `StopReason` as
    `outcome`) once `fit` has returned: the reason of the highest rank (`_STOP_ORDER`),
    or None when no callback stopped the run."""
    found = [c.outcome for c in callbacks if isinstance(getattr(c, "outcome", None), StopReason)]
    return min(found, key=lambda r: _STOP_ORDER.index(r.kind), default=None)


class RunStopper:
    """Mixin for a Keras callback that may end the run: it keeps why in `outcome`.

    The first reason is kept (a later one in the same run adds nothing the trainer
    reports). `fit` ends after the current execution (`model.stop_training`).
    """

    outcome: StopReason | None = None

    def stop_run(self, reason: StopReason) -> None:
        """Records `reason` (if none yet) and asks `fit` to stop."""
        if self.outcome is None:
            self.outcome = reason
        self.model.stop_training = True


class EveryNSteps(keras.callbacks.Callback):
    """Calls `on_interval(step, logs)` at the first execution end at or past each multiple
    of `every` steps (`every` 0: never).

    Subclasses implement `on_interval`, and may widen `due` (e.g. "also on a signal").
    A subclass overriding `on_train_begin` calls this one's.
    """

    def __init__(self, progress: RunProgress, every: int) -> None:
        super().__init__()
        self.progress = progress
        self.every = every
        self._last_step = 0  # the step of the previous execution end

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        # A `fit` call may start mid-run (a resume, the next segment).
        self._last_step = self.progress.global_step

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        step = self.progress.global_step
        if self.due(self._last_step, step):
            self.on_interval(step, logs)
        self._last_step = step

    def due(self, previous: int, step: int) -> bool:
        """Whether a multiple of `every` lies in (previous, step]."""
        return self.every > 0 and step // self.every > previous // self.every

    def on_interval(self, step: int, logs: dict[str, Any] | None) -> None:
        """Does the callback's work at `step` (an execution end)."""
        raise NotImplementedError


class ProgressTracker(keras.callbacks.Callback):
    """Keeps `RunProgress.epoch` / `step_in_epoch` current (its only writer during `fit`);
    restores a resumed epoch's running loss: `resumed_metrics`, the (variable, value)
    metric sums of a checkpoint written mid-epoch, reassigned once when that epoch
    resumes (`fit` zeroes them at each epoch start).
    """

    def __init__(
        self, progress: RunProgress, resumed_metrics: Iterable[tuple[Any, Any]] = ()
    ) -> None:
        super().__init__()
        self.progress = progress
        self.resumed_metrics = list(resumed_metrics)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.progress.epoch = epoch
        self.progress.step_in_epoch = self.progress.segment.skip
        if self.progress.step_in_epoch and self.resumed_metrics:
            for variable, value in self.resumed_metrics:
                variable.assign(value)
        self.resumed_metrics = []

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        segment = self.progress.segment
        # `batch` is the last index of the execution; the last one of an epoch may be short.
        self.progress.step_in_epoch = min(segment.skip + batch + 1, segment.limit)
