"""The state of a run, kept by the trainer and read by its callbacks: its position
(`RunProgress`, counted on the host by `ProgressTracker`, so nothing reads the device to
know where the run is), its `fit` calls (`Segment`), why it ended early (`StopReason`),
its wall time across resumes (`Clock`), and the model's loss and tau read on the host.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Literal

import keras


@dataclasses.dataclass
class Segment:
    """One `fit` call: epochs [initial_epoch, epochs), each covering batches [skip, limit)."""

    initial_epoch: int
    epochs: int
    skip: int
    limit: int


@dataclasses.dataclass
class RunProgress:
    """The run's position, kept current on the host by `ProgressTracker`.

    Attributes:
        batches_per_epoch: B, batches in one pass over the training records.
        total_steps: updates the whole run makes.
        tokens_per_batch: target tokens per batch (batch size x sequence length).
        epoch: the current epoch (0-based).
        step_in_epoch: batches of `epoch` done so far.
        segment: the `fit` call under way.
    """

    batches_per_epoch: int
    total_steps: int
    tokens_per_batch: int
    epoch: int = 0
    step_in_epoch: int = 0
    segment: Segment | None = None

    @property
    def global_step(self) -> int:
        """Updates done since the start of the run."""
        return self.epoch * self.batches_per_epoch + self.step_in_epoch

    def move_to(self, step: int) -> None:
        """Places the run at `step` (updates done), e.g. the step a resume starts from."""
        self.epoch, self.step_in_epoch = divmod(step, self.batches_per_epoch)

    def begin(self, segment: Segment) -> None:
        """Enters `segment`: the position is its first epoch, after its skipped batches."""
        self.segment = segment
        self.epoch, self.step_in_epoch = segment.initial_epoch, segment.skip


@dataclasses.dataclass(frozen=True)
class StopReason:
    """Why the run ended early.

    Attributes:
        kind: "spike" (the loss-spike guard), "non_finite" (a NaN or Inf loss) or
            "signal" (SIGINT or SIGTERM).
        step: the step the run stopped at.
        signum: the signal's number, for "signal".
    """

    kind: Literal["spike", "non_finite", "signal"]
    step: int
    signum: int | None = None


@dataclasses.dataclass(frozen=True)
class Clock:
    """The run's wall time, across resumes.

    Attributes:
        started: `time.perf_counter()` when this process's part of the run began.
        before: seconds spent before a resume.
    """

    started: float
    before: float = 0.0

    def seconds(self) -> float:
        """Seconds the run has taken so far."""
        return self.before + (time.perf_counter() - self.started)


def attach_fit_state(model: Any) -> None:
    """Makes the model's variables hold their current values during `fit`, on JAX.

    Between executions, JAX's `fit` keeps the weights, memory and optimizer state in
    arrays of its own and leaves the variables empty; Keras hands them back when a
    callback reads `self.model`. Code that reaches the variables another way (the
    checkpoint writer, an evaluator holding the model) calls this first. Elsewhere it
    does nothing.
    """
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()


def read_loss(logs: dict[str, Any] | None) -> float | None:
    """The running loss in `logs` as a float (a device sync), or None."""
    if not logs or "loss" not in logs:
        return None
    return float(keras.ops.convert_to_numpy(logs["loss"]))


def read_tau(model: Any) -> float | None:
    """The model's Gumbel temperature as a float (a device sync); None for no model, or
    a model without one (a fixed mlm encoder)."""
    tau = model.tau() if model is not None and hasattr(model, "tau") else None
    return None if tau is None else float(keras.ops.convert_to_numpy(tau))
