"""A loss-spike guard: a training step whose loss is not finite, or above `factor` times
the running mean of accepted losses once `warmup` steps have been accepted, is not
applied (docs/robustness.md). The guard judges and keeps the state; the guarded step is
the model's (partf.models.train_step). "skip" drops the step and goes on; "stop" drops it
and every later one, and the host stops the run (`callbacks.SpikeMonitor`).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

MODES = ("skip", "stop")  # "off" is no guard (None)


class SpikeGuard:
    """Drops training steps whose loss is a spike, in `mode` "skip" or "stop"; see the
    module docstring. `warmup` steps are accepted before losses are judged against the
    mean (the first losses of a run fall fast and the mean means little yet); `decay` is
    the old mean's weight in the moving average, per accepted step. State: the float32
    `mean`; int64 counts of `accepted` and `skipped` steps, and of skips in a row (`streak`).
    """

    def __init__(
        self, mode: str, factor: float = 2.0, warmup: int = 100, decay: float = 0.99
    ) -> None:
        if mode not in MODES:
            raise ValueError(
                f"unknown spike guard mode {mode!r}; choose one of {', '.join(MODES)}."
            )
        if not factor > 0:
            raise ValueError(f"the spike factor must be > 0, got {factor}.")
        if warmup < 0:
            raise ValueError(f"the spike guard warm-up must be >= 0, got {warmup}.")
        self.mode = mode
        self.factor = float(factor)
        self.warmup = int(warmup)
        self.decay = float(decay)
        self.mean = keras.Variable(0.0, dtype="float32", trainable=False, name="spike_mean")
        self.accepted = keras.Variable(0, dtype="int64", trainable=False, name="spike_accepted")
        self.skipped = keras.Variable(0, dtype="int64", trainable=False, name="spike_skipped")
        self.streak = keras.Variable(0, dtype="int64", trainable=False, name="spike_streak")

    @property
    def variables(self) -> list[keras.Variable]:
        """Everything a checkpoint must hold for an exact resume."""
        return [self.mean, self.accepted, self.skipped, self.streak]

    def judge(self, loss: Any) -> Any:
        """Whether a step with this (float32 scalar) loss may be applied."""
        finite = ops.isfinite(loss)
        warming = self.accepted < self.warmup
        ok = finite & (warming | (loss <= self.factor * self.mean))
        if self.mode == "stop":
            ok = ok & ops.equal(self.skipped, 0)
        return ok

    def record(self, ok: Any, loss: Any) -> None:
        """Updates the running mean and the counts after a step was judged."""
        safe = ops.where(ok, loss, 0.0)
        first = ops.equal(self.accepted, 0)
        blended = self.decay * self.mean + (1.0 - self.decay) * safe
        self.mean.assign(ops.where(ok, ops.where(first, safe, blended), self.mean))
        self.accepted.assign_add(ops.cast(ok, "int64"))
        self.skipped.assign_add(1 - ops.cast(ok, "int64"))
        self.streak.assign(ops.where(ok, ops.zeros_like(self.streak), self.streak + 1))
