"""Everything around the compiled train step, as Keras callbacks.

The train step itself (forward, loss, gradients, update, XL memory, tau) runs inside
`fit`'s compiled function, `steps_per_execution` steps per call. Callbacks run between
calls, on the host, and read device values only when they have something to do (every
`log_every` steps, at checkpoints, at epoch ends), so there is no host sync per step.

Steps are counted on the host by `ProgressTracker` from `fit`'s batch indices and the
known epoch length, so no callback reads the device to know where it is.

Order matters; the trainer installs them as
`[ProgressTracker, MemoryReset, MetricsLogger, PiPlotter, ValidationCallback, Checkpointer]`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from partf.training.perplexity import Evaluator, perplexity_report
from partf.training.plots import save_pi_heatmap

logger = logging.getLogger("partf.training")


@dataclasses.dataclass
class Segment:
    """One `fit` call: epochs [initial_epoch, epochs), each covering batches [skip, limit)."""

    initial_epoch: int
    epochs: int
    skip: int
    limit: int


@dataclasses.dataclass
class RunProgress:
    """Host-side state shared by the callbacks and the trainer.

    Attributes:
        batches_per_epoch: B, batches in one pass over the training records.
        total_steps: updates the whole run makes.
        tokens_per_batch: target tokens per batch (batch size x sequence length).
        epoch: the current epoch (0-based).
        step_in_epoch: batches of `epoch` done so far.
        segment: the `fit` call under way.
        last_loss: the running training loss last read (host float), or None.
        interrupt: signal number when SIGINT/SIGTERM asked to stop, else None.
        non_finite: set when a NaN or Inf loss was seen.
        last_checkpoint: path of the newest checkpoint written or restored.
        restore_metrics: (variable, value) pairs to reassign when a resumed epoch begins.
        valid_report: the newest validation figures.
        valid_report_step: the step they were computed at.
        skipped_steps: steps the loss-spike guard dropped so far (as last read).
        spike_stop: the step at which the guard stopped the run ("stop" mode), else None.
    """

    batches_per_epoch: int
    total_steps: int
    tokens_per_batch: int
    epoch: int = 0
    step_in_epoch: int = 0
    segment: Segment | None = None
    last_loss: float | None = None
    interrupt: int | None = None
    non_finite: bool = False
    last_checkpoint: str | None = None
    restore_metrics: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)
    valid_report: dict[str, Any] | None = None
    valid_report_step: int | None = None
    skipped_steps: int = 0
    spike_stop: int | None = None

    @property
    def global_step(self) -> int:
        """Updates done since the start of the run."""
        return self.epoch * self.batches_per_epoch + self.step_in_epoch


def _crossed(previous: int, current: int, every: int) -> bool:
    """Whether a multiple of `every` lies in (previous, current]."""
    return every > 0 and current // every > previous // every


def read_loss(logs: dict[str, Any] | None) -> float | None:
    """The running loss in `logs` as a float (a device sync), or None."""
    if not logs or "loss" not in logs:
        return None
    return float(keras.ops.convert_to_numpy(logs["loss"]))


class ProgressTracker(keras.callbacks.Callback):
    """Keeps `RunProgress.epoch` / `step_in_epoch` current; restores resumed metrics."""

    def __init__(self, progress: RunProgress) -> None:
        super().__init__()
        self.progress = progress

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self.progress.epoch = epoch
        self.progress.step_in_epoch = self.progress.segment.skip
        if self.progress.step_in_epoch and self.progress.restore_metrics:
            # fit() zeroed the running loss; a resumed epoch continues its sums.
            for variable, value in self.progress.restore_metrics:
                variable.assign(value)
        self.progress.restore_metrics = []

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        segment = self.progress.segment
        # `batch` is the last index of the execution; the last one of an epoch may be short.
        self.progress.step_in_epoch = min(segment.skip + batch + 1, segment.limit)


class MemoryReset(keras.callbacks.Callback):
    """Empties the training memory when an epoch starts from its first batch.

    A run resumed in the middle of an epoch keeps the memory restored from the checkpoint.
    """

    def __init__(self, progress: RunProgress) -> None:
        super().__init__()
        self.progress = progress

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        if self.progress.step_in_epoch == 0:
            self.model.reset_state("train")


class MetricsLogger(keras.callbacks.Callback):
    """Every `log_every` steps: loss, perplexity, lr, tau, tokens/s and pi, to TensorBoard
    and `training.log`. A NaN or Inf loss stops the run.

    Args:
        progress: the shared `RunProgress`.
        writer: the `tf.summary` writer of logs/<model_name>/train.
        lr_value: step -> learning rate (host arithmetic, no device read).
        log_every: steps between records.
    """

    def __init__(
        self,
        progress: RunProgress,
        writer: Any,
        lr_value: Callable[[int], float],
        log_every: int,
    ) -> None:
        super().__init__()
        self.progress = progress
        self.writer = writer
        self.lr_value = lr_value
        self.log_every = log_every
        self._last_step = 0
        self._last_time = 0.0
        self._timed_from: int | None = None

    def on_train_begin(self, logs=None) -> None:
        self._last_step = self.progress.global_step
        self._timed_from = None

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        step = self.progress.global_step
        if self._timed_from is None:
            # The first execution includes compilation: time from its end.
            self._timed_from = step
            self._last_time = time.perf_counter()
        if _crossed(self._last_step, step, self.log_every):
            self.record(step, logs)
        self._last_step = step

    def record(self, step: int, logs: dict[str, Any] | None) -> None:
        """Reads the device once and writes one record at `step`."""
        loss = read_loss(logs)
        if loss is None:
            return
        self.progress.last_loss = loss
        now = time.perf_counter()
        tokens_per_second = None
        if self._timed_from is not None and step > self._timed_from and now > self._last_time:
            steps = step - self._timed_from
            tokens_per_second = steps * self.progress.tokens_per_batch / (now - self._last_time)
        self._timed_from, self._last_time = step, now
        tau = float(keras.ops.convert_to_numpy(self.model.tau()))
        lr = self.lr_value(max(step - 1, 0))  # the rate of the update that made `step`
        pi = np.asarray(self.model.pi())
        names = list(self.model.candidate_names)
        with self.writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            if math.isfinite(loss):
                tf.summary.scalar("perplexity", math.exp(min(loss, 700.0)))
            tf.summary.scalar("lr", lr)
            tf.summary.scalar("tau", tau)
            if tokens_per_second is not None:
                tf.summary.scalar("tokens_per_second", tokens_per_second)
            for block in range(pi.shape[0]):
                for k, name in enumerate(names):
                    tf.summary.scalar(f"pi/block_{block}/{name}", pi[block, k])
        speed = f" {tokens_per_second:,.0f} tok/s" if tokens_per_second else ""
        logger.info(
            "step %d/%d epoch %d: loss %.4f, lr %.3g, tau %.3f%s",
            step,
            self.progress.total_steps,
            self.progress.epoch + 1,
            loss,
            lr,
            tau,
            speed,
        )
        if not math.isfinite(loss):
            self.progress.non_finite = True
            self.model.stop_training = True
            logger.error("loss is %s at step %d: stopping.", loss, step)

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        loss = read_loss(logs)
        if loss is not None and not self.model.stop_training:
            self.progress.last_loss = loss
            logger.info(
                "epoch %d done at step %d: mean loss %.4f",
                epoch + 1,
                self.progress.global_step,
                loss,
            )
            if not math.isfinite(loss):
                self.progress.non_finite = True
                self.model.stop_training = True
        self.writer.flush()


class SpikeMonitor(keras.callbacks.Callback):
    """Reports the loss-spike guard's skipped steps; stops the run in "stop" mode.

    In "skip" mode the count is read every `log_every` steps (with the other figures) and
    at epoch ends: TensorBoard scalar `skipped_steps`, and a warning in `training.log`
    when it grew. In "stop" mode it is read after every execution (one scalar), and a
    spike stops training; the trainer then exits with a message (status 1).

    Args:
        progress: the shared `RunProgress`.
        writer: the `tf.summary` writer of logs/<model_name>/train.
        guard: the installed `partf.training.spike_guard.SpikeGuard`.
        log_every: steps between reads in "skip" mode.
    """

    #: Skips in a row after which "skip" mode gives up (the loss never comes back).
    MAX_STREAK = 50

    def __init__(self, progress: RunProgress, writer: Any, guard: Any, log_every: int) -> None:
        super().__init__()
        self.progress = progress
        self.writer = writer
        self.guard = guard
        self.log_every = log_every
        self._last_step = 0

    def on_train_begin(self, logs=None) -> None:
        self._last_step = self.progress.global_step
        self.progress.skipped_steps = int(self.guard.skipped.numpy())

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        step = self.progress.global_step
        if self.guard.mode == "stop" or _crossed(self._last_step, step, self.log_every):
            self.check(step)
        self._last_step = step

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        self.check(self.progress.global_step)

    def check(self, step: int) -> None:
        """Reads the count (a device read) and reports or stops."""
        skipped = int(self.guard.skipped.numpy())
        if skipped == self.progress.skipped_steps:
            return
        new = skipped - self.progress.skipped_steps
        self.progress.skipped_steps = skipped
        with self.writer.as_default(step=step):
            tf.summary.scalar("skipped_steps", skipped)
        if self.guard.mode == "stop":
            self.progress.spike_stop = step
            self.model.stop_training = True
            logger.error(
                "loss spike (above %g x the running mean %.4f, or NaN) by step %d: stopping.",
                self.guard.factor,
                float(self.guard.mean.numpy()),
                step,
            )
            return
        logger.warning(
            "loss spike guard: %d step(s) skipped by step %d (%d in all; a spike is a loss "
            "above %g x the running mean %.4f, or NaN).",
            new,
            step,
            skipped,
            self.guard.factor,
            float(self.guard.mean.numpy()),
        )
        if int(self.guard.streak.numpy()) >= self.MAX_STREAK:
            self.progress.spike_stop = step
            self.model.stop_training = True
            logger.error("the last %d steps were all skipped: stopping.", self.MAX_STREAK)


class PiPlotter(keras.callbacks.Callback):
    """Every `plot_every` steps: plots/<model_name>/step<N>.png and a TensorBoard image.

    N is the step at which the picture was taken: the first execution end at or after
    each multiple of `plot_every`.
    """

    def __init__(self, progress: RunProgress, writer: Any, folder: Path, plot_every: int):
        super().__init__()
        self.progress = progress
        self.writer = writer
        self.folder = Path(folder)
        self.plot_every = plot_every
        self._last_step = 0

    def on_train_begin(self, logs=None) -> None:
        self._last_step = self.progress.global_step

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        step = self.progress.global_step
        if _crossed(self._last_step, step, self.plot_every):
            self.plot(step)
        self._last_step = step

    def plot(self, step: int) -> None:
        """Writes the heatmap of the current pi for `step`."""
        png = save_pi_heatmap(
            self.model.pi(),
            self.model.candidate_names,
            self.folder / f"step{step}.png",
            title=f"Iteration {step}",
        )
        with self.writer.as_default(step=step):
            tf.summary.image("pi", tf.io.decode_png(png, channels=3)[None])


class ValidationCallback(keras.callbacks.Callback):
    """Scores the validation split at each epoch end and every `eval_every` steps.

    Evaluation uses the model's evaluation memory, starting empty, so the training memory
    is untouched. Figures go to TensorBoard (logs/<model_name>/valid), `training.log` and
    the epoch's logs (`val_loss`, `val_perplexity`, shown by the progress bar).

    Args:
        progress: the shared `RunProgress`.
        writer: the `tf.summary` writer of logs/<model_name>/valid.
        evaluator: an `Evaluator` for the model.
        dataset: the validation split.
        eval_every: steps between validations (0: epoch ends only).
        text_counts: keyword arguments of `perplexity_report` (word and character counts).
    """

    def __init__(
        self,
        progress: RunProgress,
        writer: Any,
        evaluator: Evaluator,
        dataset: tf.data.Dataset,
        eval_every: int = 0,
        text_counts: dict[str, int | None] | None = None,
    ) -> None:
        super().__init__()
        self.progress = progress
        self.writer = writer
        self.evaluator = evaluator
        self.dataset = dataset
        self.eval_every = eval_every
        self.text_counts = text_counts or {}
        self._last_step = 0

    def on_train_begin(self, logs=None) -> None:
        self._last_step = self.progress.global_step

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        step = self.progress.global_step
        if _crossed(self._last_step, step, self.eval_every) and step < self._epoch_end():
            self.validate(step)
        self._last_step = step

    def _epoch_end(self) -> int:
        return self.progress.epoch * self.progress.batches_per_epoch + self.progress.segment.limit

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        if self.model.stop_training:
            return  # stopped by a NaN or a signal: leave quickly
        report = self.validate(self.progress.global_step)
        if logs is not None:
            logs["val_loss"] = report["loss"]
            logs["val_perplexity"] = report["perplexity"]

    def validate(self, step: int) -> dict[str, Any]:
        """Scores the split now and records the figures at `step`."""
        start = time.perf_counter()
        report = perplexity_report(self.evaluator.evaluate(self.dataset), **self.text_counts)
        self.progress.valid_report = report
        self.progress.valid_report_step = step
        with self.writer.as_default(step=step):
            for name, value in report.items():
                if name.startswith("num_") or value is None or not math.isfinite(value):
                    continue
                tf.summary.scalar(name, value)
        self.writer.flush()
        logger.info(
            "validation at step %d: loss %.4f, perplexity %.2f (original's figure %.2f) in %.1fs",
            step,
            report["loss"],
            report["perplexity"],
            report["perplexity_original"],
            time.perf_counter() - start,
        )
        return report


class Checkpointer(keras.callbacks.Callback):
    """Saves a checkpoint every `ckpt_every` steps, at each epoch end, and on SIGINT/SIGTERM.

    A checkpoint is written only after the running loss reads back finite, so the newest
    checkpoint is always a good one. On a signal it saves and stops training.

    Args:
        progress: the shared `RunProgress`.
        save: step -> path; writes one checkpoint (the trainer's `save_checkpoint`).
        ckpt_every: steps between checkpoints (0: epoch ends only).
    """

    def __init__(self, progress: RunProgress, save: Callable[[int], str], ckpt_every: int = 0):
        super().__init__()
        self.progress = progress
        self.save = save
        self.ckpt_every = ckpt_every
        self._last_step = 0

    def on_train_begin(self, logs=None) -> None:
        self._last_step = self.progress.global_step

    def on_train_batch_end(self, batch: int, logs=None) -> None:
        step = self.progress.global_step
        if self.progress.interrupt is not None:
            self._save_if_finite(step, logs)
            self.model.stop_training = True
        elif _crossed(self._last_step, step, self.ckpt_every):
            self._save_if_finite(step, logs)
        self._last_step = step

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        if not self.model.stop_training:  # a stop has already saved (signal) or must not
            self._save_if_finite(self.progress.global_step, logs)

    def _save_if_finite(self, step: int, logs: dict[str, Any] | None) -> None:
        if self.progress.non_finite:
            return
        loss = read_loss(logs)
        if loss is not None:
            self.progress.last_loss = loss
        if loss is not None and not math.isfinite(loss):
            self.progress.non_finite = True
            self.model.stop_training = True
            logger.error("loss is %s at step %d: stopping without a checkpoint.", loss, step)
            return
        if self.progress.last_checkpoint and self.progress.last_checkpoint.endswith(
            f"ckpt-{step:08d}.npz"
        ):
            return  # already saved at this step
        self.progress.last_checkpoint = self.save(step)
        logger.info("checkpoint at step %d: %s", step, self.progress.last_checkpoint)
