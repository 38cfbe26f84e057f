"""The Gumbel-softmax temperature tau: annealed by a schedule, or learned.

The temperature is computed in the graph from the model's own step counter,
so a compiled training step (XLA, several steps per execution) anneals it
without any Python callback.

Reference: Jang et al., "Categorical Reparameterization with Gumbel-Softmax",
ICLR 2017 (section 2: annealing tau towards a categorical).
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from partf.attention.base import check_choice
from partf.serialization import register

TAU_SCHEDULES = ("exponential", "linear", "cosine", "constant")


def scheduled_temperature(
    step: Any,
    schedule: str = "exponential",
    tau_start: float = 1.0,
    tau_end: float = 0.1,
    tau_steps: int = 1,
) -> Any:
    """float32 tau after `step` steps of a schedule from `tau_start` (step 0) to `tau_end`
    (from `tau_steps` on, then constant), both > 0:
    - exponential: tau_start * (tau_end / tau_start) ** (step / tau_steps)
      (the original project's ExponentialDecay when tau_start == 1);
    - linear: straight line;
    - cosine: tau_end + (tau_start - tau_end) * (1 + cos(pi * step / tau_steps)) / 2;
    - constant: tau_start throughout.

    Example:
        >>> float(scheduled_temperature(50, "linear", 1.0, 0.5, 100))
        0.75"""
    check_choice("tau schedule", schedule, TAU_SCHEDULES)
    frac = ops.clip(ops.cast(step, "float32") / float(tau_steps), 0.0, 1.0)
    start, end = float(tau_start), float(tau_end)
    if schedule == "exponential":
        return start * ops.power(end / start, frac)
    if schedule == "linear":
        return start + (end - start) * frac
    if schedule == "cosine":
        return end + 0.5 * (start - end) * (1.0 + ops.cos(math.pi * frac))
    return ops.cast(start, "float32") + 0.0 * frac


@register
class Temperature(keras.layers.Layer):
    """Maps the training step to float32 tau by `scheduled_temperature` (the trainer sets
    `tau_steps` to the run's total steps); or, with `tau_is_trainable`, holds tau as exp
    of a trainable scalar initialised at log(tau_start), the schedule ignored.

    Example:
        >>> layer = Temperature("exponential", 1.0, 0.1, tau_steps=1000)
        >>> float(layer(keras.ops.convert_to_tensor(500)))  # sqrt(0.1)
        0.3162..."""

    def __init__(
        self,
        schedule: str = "exponential",
        tau_start: float = 1.0,
        tau_end: float = 0.1,
        tau_steps: int = 1,
        tau_is_trainable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        validate_temperature(schedule, tau_start, tau_end, tau_steps)
        self.schedule = schedule
        self.tau_start = float(tau_start)
        self.tau_end = float(tau_end)
        self.tau_steps = int(tau_steps)
        self.tau_is_trainable = bool(tau_is_trainable)
        if self.tau_is_trainable:
            self.log_tau = self.add_weight(
                name="log_tau",
                shape=(),
                dtype="float32",
                initializer=keras.initializers.Constant(math.log(self.tau_start)),
                autocast=False,
            )
        self.built = True

    def call(self, step: Any) -> Any:
        if self.tau_is_trainable:
            return ops.exp(ops.cast(self.log_tau, "float32"))
        return scheduled_temperature(
            step, self.schedule, self.tau_start, self.tau_end, self.tau_steps
        )

    def compute_output_spec(self, step: Any) -> keras.KerasTensor:
        return keras.KerasTensor((), dtype="float32")

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            schedule=self.schedule,
            tau_start=self.tau_start,
            tau_end=self.tau_end,
            tau_steps=self.tau_steps,
            tau_is_trainable=self.tau_is_trainable,
        )
        return config


def validate_temperature(
    schedule: str, tau_start: float, tau_end: float, tau_steps: int | None
) -> None:
    """Raises ValueError for an unknown schedule or non-positive settings (`tau_steps`
    None: the run's length is not known yet, and is checked once it is)."""
    check_choice("tau_schedule", schedule, TAU_SCHEDULES)
    if tau_start <= 0 or tau_end <= 0:
        raise ValueError(f"tau_start and tau_end must be positive, got {tau_start} and {tau_end}.")
    if tau_steps is not None and tau_steps < 1:
        raise ValueError(f"tau_steps must be >= 1, got {tau_steps}; use the run's total steps.")
