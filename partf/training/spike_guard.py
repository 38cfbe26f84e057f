"""A loss-spike guard: a training step whose loss jumps far above the recent average (or
is NaN/Inf) is not applied.

Inside `fit`'s compiled function, `steps_per_execution` steps run without returning to
the host, so a step cannot be skipped with Python control flow. The guarded step computes
the update as usual and then keeps, for every weight and optimizer slot, either the new
value or the old one (`where(ok, new, old)`): the same graph runs every step, which XLA
compiles like any other. The optimizer's step counter still advances, so the learning-rate
schedule stays aligned with the position in the data.

A loss counts as a spike when it is not finite, or when it exceeds `factor` times the
running mean of the accepted losses (an exponential moving average), once `warmup`
steps have been accepted. In "skip" mode the step is dropped and training goes on; in
"stop" mode this step and every later one of the run are dropped and the host stops the
run (see `partf.training.callbacks.SpikeMonitor`). Skipped steps are counted in
`skipped`, which the trainer logs and checkpoints.

Example:
    >>> guard = SpikeGuard("skip", factor=2.0, warmup=100)
    >>> model.compile(optimizer="adam", jit_compile=True, steps_per_execution=32)
    >>> guard.install(model)
    >>> model.fit(data)
    >>> int(guard.skipped.numpy())
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

MODES = ("off", "skip", "stop")


class SpikeGuard:
    """Drops training steps whose loss is a spike; see the module docstring.

    Args:
        mode: "skip" (drop the step, go on) or "stop" (drop it and every later step; the
            host stops the run). "off" is accepted and installs nothing.
        factor: a loss above `factor` x the running mean of accepted losses is a spike.
        warmup: accepted steps before losses are judged against the mean (the first
            losses of a run fall fast and the mean means little yet).
        decay: weight of the old mean in the moving average, per accepted step.

    Attributes:
        mean, accepted, skipped, streak: state variables (float32 mean; int64 counts of
            accepted and skipped steps, and of skips in a row).
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

    def install(self, model: keras.Model) -> None:
        """Replaces `model.train_step` by the guarded step (after `compile`, before `fit`)."""
        if self.mode == "off":
            return
        if keras.backend.backend() != "tensorflow":
            raise ValueError(
                "--spike_guard needs the TensorFlow backend (its guarded step is a "
                "tf.GradientTape step); use --spike_guard=off, or KERAS_BACKEND=tensorflow."
            )
        model.train_step = lambda data: self.train_step(model, data)
        model.make_train_function(force=True)

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

    def train_step(self, model: keras.Model, data: Any) -> dict[str, Any]:
        """Keras's TensorFlow train step, with the update kept only when `judge` allows."""
        import tensorflow as tf

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            scaled = model.optimizer.scale_loss(loss)
        loss = ops.cast(loss, "float32")
        ok = self.judge(loss)
        weights = model.trainable_variables
        gradients = tape.gradient(scaled, weights)
        # The optimizer's step counter advances either way (the schedule follows the data).
        guarded = list(weights) + [
            v for v in model.optimizer.variables if v.name not in ("iteration", "iterations")
        ]
        before = [tf.identity(v.value) for v in guarded]
        with tf.control_dependencies(before):
            model.optimizer.apply_gradients(zip(gradients, weights, strict=True))
        for variable, old in zip(guarded, before, strict=True):
            variable.assign(ops.where(ok, variable.value, old))
        # The running loss of the logs and progress bar averages the applied steps only.
        batch = ops.cast(ops.shape(keras.tree.flatten(x)[0])[0], "float32")
        model._loss_tracker.update_state(
            ops.where(ok, loss, 0.0), sample_weight=ops.where(ok, batch, 0.0)
        )
        self.record(ok, loss)
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
