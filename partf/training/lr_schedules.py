"""Learning-rate schedules: linear warm-up then cosine decay to zero, or inverse square root.

Each schedule is a `keras.optimizers.schedules.LearningRateSchedule` evaluated at the
optimizer's update count `step` (0 for the first update), so it runs inside the compiled
train step with no host work. `value_at(step)` gives the same number in plain Python for
logging without touching the device.

Example:
    >>> schedule = WarmupCosine(max_lr=1e-4, warmup_steps=4000, total_steps=60000)
    >>> schedule.value_at(4000)
    0.0001
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from partf.serialization import register

SCHEDULES = ("cosine", "inverse_sqrt", "constant")


def _check_non_negative(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}.")


@register
class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `max_lr`, then half a cosine down to zero at `total_steps`.

    lr(s) = max_lr * s / warmup_steps                                  for s < warmup_steps
    lr(s) = max_lr * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2  afterwards, 0 past total

    This is the original project's `CosineSchedule` with its `decay_steps` equal to
    `total_steps - warmup_steps` (Loshchilov and Hutter, "SGDR", 2017, without restarts).
    `warmup_steps` 0 starts at `max_lr`.
    """

    def __init__(self, max_lr: float, warmup_steps: int, total_steps: int) -> None:
        _check_non_negative(max_lr=max_lr, warmup_steps=warmup_steps)
        if total_steps <= 0:
            raise ValueError(f"total_steps must be positive, got {total_steps}.")
        self.max_lr = float(max_lr)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)

    def __call__(self, step: Any) -> Any:
        step = ops.cast(step, "float32")
        warm = float(max(self.warmup_steps, 1))
        linear = self.max_lr * step / warm if self.warmup_steps else self.max_lr
        decay = float(max(self.total_steps - self.warmup_steps, 1))
        progress = ops.clip((step - self.warmup_steps) / decay, 0.0, 1.0)
        cosine = 0.5 * self.max_lr * (1.0 + ops.cos(math.pi * progress))
        return ops.minimum(linear, cosine)

    def value_at(self, step: int) -> float:
        """The rate at `step` in plain Python (for logs; no device work)."""
        linear = self.max_lr * step / self.warmup_steps if self.warmup_steps else self.max_lr
        decay = max(self.total_steps - self.warmup_steps, 1)
        progress = min(max((step - self.warmup_steps) / decay, 0.0), 1.0)
        return min(linear, 0.5 * self.max_lr * (1.0 + math.cos(math.pi * progress)))

    def get_config(self) -> dict[str, Any]:
        return {
            "max_lr": self.max_lr,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


@register
class InverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `max_lr`, then decay as 1 / sqrt(step).

    lr(s) = max_lr * min(s / warmup_steps, sqrt(warmup_steps / s))

    With `max_lr = (d_model * warmup_steps) ** -0.5` this is the schedule of Vaswani et al.,
    "Attention is all you need", 2017 (the original project's `TransformerSchedule`).
    `warmup_steps` must be positive.
    """

    def __init__(self, max_lr: float, warmup_steps: int) -> None:
        _check_non_negative(max_lr=max_lr)
        if warmup_steps <= 0:
            raise ValueError(
                f"the inverse_sqrt schedule needs warmup_steps > 0, got {warmup_steps}."
            )
        self.max_lr = float(max_lr)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step: Any) -> Any:
        step = ops.maximum(ops.cast(step, "float32"), 1e-9)
        warm = float(self.warmup_steps)
        return self.max_lr * ops.minimum(step / warm, ops.sqrt(warm / step))

    def value_at(self, step: int) -> float:
        step = max(float(step), 1e-9)
        warm = float(self.warmup_steps)
        return self.max_lr * min(step / warm, math.sqrt(warm / step))

    def get_config(self) -> dict[str, Any]:
        return {"max_lr": self.max_lr, "warmup_steps": self.warmup_steps}


@register
class Constant(keras.optimizers.schedules.LearningRateSchedule):
    """A fixed rate, optionally zero for the first `delay_steps` updates.

    The delay freezes the variables it drives (the PAR paper keeps the architecture
    logits frozen for the first 10k steps): with a zero rate Adam moves nothing, and
    decoupled weight decay, which is scaled by the rate, does nothing either.
    """

    def __init__(self, lr: float, delay_steps: int = 0) -> None:
        _check_non_negative(lr=lr, delay_steps=delay_steps)
        self.lr = float(lr)
        self.delay_steps = int(delay_steps)

    def __call__(self, step: Any) -> Any:
        started = ops.cast(ops.greater_equal(step, self.delay_steps), "float32")
        return self.lr * started

    def value_at(self, step: int) -> float:
        return self.lr if step >= self.delay_steps else 0.0

    def get_config(self) -> dict[str, Any]:
        return {"lr": self.lr, "delay_steps": self.delay_steps}


@register
class Delayed(keras.optimizers.schedules.LearningRateSchedule):
    """Another schedule, held at zero for the first `delay_steps` updates, then followed
    at its own step count (so the two stay aligned with the main optimizer)."""

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule, delay_steps: int):
        _check_non_negative(delay_steps=delay_steps)
        if isinstance(schedule, dict):
            schedule = keras.saving.deserialize_keras_object(schedule)
        self.schedule = schedule
        self.delay_steps = int(delay_steps)

    def __call__(self, step: Any) -> Any:
        started = ops.cast(ops.greater_equal(step, self.delay_steps), "float32")
        return self.schedule(step) * started

    def value_at(self, step: int) -> float:
        return self.schedule.value_at(step) if step >= self.delay_steps else 0.0

    def get_config(self) -> dict[str, Any]:
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "delay_steps": self.delay_steps,
        }


def build_schedule(
    name: str, max_lr: float, warmup_steps: int, total_steps: int
) -> keras.optimizers.schedules.LearningRateSchedule:
    """The schedule called `name`: "cosine" (`WarmupCosine`, the original's),
    "inverse_sqrt" or "constant" (`max_lr` throughout); each has `value_at(step)`."""
    if name == "cosine":
        return WarmupCosine(max_lr, warmup_steps, total_steps)
    if name == "inverse_sqrt":
        return InverseSqrt(max_lr, warmup_steps)
    if name == "constant":
        return Constant(max_lr)
    raise ValueError(f"unknown lr_schedule {name!r}; valid names: {', '.join(SCHEDULES)}.")
