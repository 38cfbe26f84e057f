"""The callbacks that report on a run: figures, the spike guard's count, pi, validation.

Each acts every N steps through `partf.training.callbacks.progress.EveryNSteps`; those
that can end the run (a NaN loss, a loss spike) keep why in their `outcome`
(`RunStopper`). See `partf.training.callbacks` for the whole set and its order. Each
takes the run's position, `progress`, and `writer`, the TensorBoard writer of
logs/<model_name>/train (of .../valid for the validation).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np

from partf.models.cost import candidate_flops
from partf.training.callbacks.progress import EveryNSteps, RunStopper
from partf.training.evaluation.perplexity import Evaluator, score
from partf.training.plots import save_pi_heatmap
from partf.training.run_state import (
    RunProgress,
    StopReason,
    attach_fit_state,
    read_loss,
    read_tau,
)
from partf.training.summaries import write_image, write_scalars

logger = logging.getLogger("partf.training")


class MetricsLogger(EveryNSteps, RunStopper):
    """Every `log_every` steps: loss, perplexity, lr, tau, tokens/s and pi, to TensorBoard
    and `training.log`; for a search, also `search/expected_cost`, the forward FLOPs per
    token of the blocks expected under pi (partf.models.cost). A NaN or Inf loss stops the
    run (`outcome` "non_finite"). `lr_value`: step -> learning rate (host arithmetic, no
    device read); `seq_len`: tokens per segment, which the candidates' costs depend on
    (None: no cost).
    """

    def __init__(
        self,
        progress: RunProgress,
        writer: Any,
        lr_value: Callable[[int], float],
        log_every: int,
        seq_len: int | None = None,
    ) -> None:
        super().__init__(progress, log_every)
        self.writer = writer
        self.lr_value = lr_value
        self.seq_len = seq_len
        self._costs: list[np.ndarray] | None = None  # per block, each candidate's FLOPs
        self._last_time = 0.0
        self._timed_from: int | None = None  # the step tokens/s is measured from

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_begin(logs)
        self._timed_from = None

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._timed_from is None:
            # The first execution includes compilation: time from its end.
            self._timed_from = self.progress.global_step
            self._last_time = time.perf_counter()
        super().on_train_batch_end(batch, logs)

    def on_interval(self, step: int, logs: dict[str, Any] | None) -> None:
        """Reads the device once and writes one record at `step`."""
        loss = read_loss(logs)
        if loss is None:
            return
        now = time.perf_counter()
        tokens_per_second = None
        if self._timed_from is not None and step > self._timed_from and now > self._last_time:
            steps = step - self._timed_from
            tokens_per_second = steps * self.progress.tokens_per_batch / (now - self._last_time)
        self._timed_from, self._last_time = step, now
        tau = read_tau(self.model)  # None: a fixed encoder (--objective=mlm)
        lr = self.lr_value(max(step - 1, 0))  # the rate of the update that made `step`
        pi = np.asarray(self.model.pi())
        names = list(self.model.candidate_names)
        scalars = {"loss": loss}
        if math.isfinite(loss):
            scalars["perplexity"] = math.exp(min(loss, 700.0))
        scalars["lr"] = lr
        if tau is not None:
            scalars["tau"] = tau
        if tokens_per_second is not None:
            scalars["tokens_per_second"] = tokens_per_second
        for block in range(pi.shape[0]):
            for k, name in enumerate(names):
                scalars[f"pi/block_{block}/{name}"] = pi[block, k]
        cost = self.expected_cost()
        if cost is not None:
            scalars["search/expected_cost"] = cost
        # Primal's KSVD term (eta x J summed over its layers, the last step's), on its own.
        ksvd = (logs or {}).get("ksvd_loss")
        if ksvd is not None:
            scalars["ksvd_loss"] = float(keras.ops.convert_to_numpy(ksvd))
        write_scalars(self.writer, step, scalars)
        speed = f" {tokens_per_second:,.0f} tok/s" if tokens_per_second else ""
        logger.info(
            "step %d/%d epoch %d: loss %.4f, lr %.3g%s%s",
            step,
            self.progress.total_steps,
            self.progress.epoch + 1,
            loss,
            lr,
            "" if tau is None else f", tau {tau:.3f}",
            speed,
        )
        if not math.isfinite(loss):
            self.stop_run(StopReason("non_finite", step))
            logger.error("loss is %s at step %d: stopping.", loss, step)

    def expected_cost(self) -> float | None:
        """Forward FLOPs per token of the blocks expected under the current pi (host
        arithmetic); None for a fixed architecture or without `seq_len`."""
        if self.seq_len is None or not self.model.config.is_stochastic:
            return None
        if self._costs is None:
            self._costs = [np.asarray(c) for c in candidate_flops(self.model, self.seq_len)]
        pi = [np.asarray(keras.ops.convert_to_numpy(b.pi())) for b in self.model.blocks]
        return float(sum(np.dot(p, c) for p, c in zip(pi, self._costs, strict=True)))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        loss = read_loss(logs)
        if loss is not None and not self.model.stop_training:
            logger.info(
                "epoch %d done at step %d: mean loss %.4f",
                epoch + 1,
                self.progress.global_step,
                loss,
            )
            if not math.isfinite(loss):
                self.stop_run(StopReason("non_finite", self.progress.global_step))
        self.writer.flush()


class SpikeMonitor(EveryNSteps, RunStopper):
    """Reports the loss-spike guard's skipped steps; stops the run in "stop" mode.

    In "skip" mode the count is read every `log_every` steps (with the other figures) and
    at epoch ends: TensorBoard scalar `skipped_steps`, and a warning in `training.log`
    when it grew. In "stop" mode it is read after every execution (one scalar), and a
    spike stops training (`outcome` "spike"); the trainer then exits with a message
    (status 1). "skip" mode also stops, as a spike, after `MAX_STREAK` skips in a row.
    `skipped` is the `guard`'s (`partf.training.spike_guard.SpikeGuard`) count of skipped
    steps, as last read.
    """

    #: Skips in a row after which "skip" mode gives up (the loss never comes back).
    MAX_STREAK = 50

    def __init__(self, progress: RunProgress, writer: Any, guard: Any, log_every: int) -> None:
        super().__init__(progress, log_every)
        self.writer = writer
        self.guard = guard
        self.skipped = 0

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_begin(logs)
        self.skipped = int(self.guard.skipped.numpy())

    def due(self, previous: int, step: int) -> bool:
        # "stop" must see a spike at the execution that holds it, to stop right there.
        return self.guard.mode == "stop" or super().due(previous, step)

    def on_interval(self, step: int, logs: dict[str, Any] | None) -> None:
        self.check(step)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.check(self.progress.global_step)

    def check(self, step: int) -> None:
        """Reads the count (a device read) and reports or stops."""
        skipped = int(self.guard.skipped.numpy())
        if skipped == self.skipped:
            return
        new = skipped - self.skipped
        self.skipped = skipped
        write_scalars(self.writer, step, {"skipped_steps": skipped})
        if self.guard.mode == "stop":
            self.stop_run(StopReason("spike", step))
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
            self.stop_run(StopReason("spike", step))
            logger.error("the last %d steps were all skipped: stopping.", self.MAX_STREAK)


class PiPlotter(EveryNSteps):
    """Every `plot_every` steps: plots/<model_name>/step<N>.png and a TensorBoard image.

    N is the step at which the picture was taken: the first execution end at or after
    each multiple of `plot_every`, and the step where training ends, so that a run
    shorter than `plot_every` (a --max_steps run) has its heatmap in TensorBoard too.
    """

    def __init__(self, progress: RunProgress, writer: Any, folder: Path, plot_every: int):
        super().__init__(progress, plot_every)
        self.writer = writer
        self.folder = Path(folder)
        self.plotted_step: int | None = None  # the step of the newest picture

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        # `fit` ends at every segment (epoch) end too; only the run's last step counts.
        step = self.progress.global_step
        last = step == self.progress.total_steps
        if self.every > 0 and last and step != self.plotted_step:
            self.on_interval(step, logs)

    def on_interval(self, step: int, logs: dict[str, Any] | None) -> None:
        """Writes the heatmap of the current pi for `step`."""
        self.plotted_step = step
        png = save_pi_heatmap(
            self.model.pi(),
            self.model.candidate_names,
            self.folder / f"step{step}.png",
            title=f"Iteration {step}",
        )
        write_image(self.writer, step, "pi", png)


class ValidationCallback(EveryNSteps):
    """Scores the validation split at each epoch end and every `eval_every` steps, with the
    model's evaluation memory (starting empty, so the training memory is untouched), to
    TensorBoard (logs/<model_name>/valid), `training.log` and the epoch's logs
    (`val_loss`, `val_perplexity`); `report` keeps the newest figures, `report_step` their
    step (None for figures of other block weights than the run's own).

    `text_counts` are `perplexity_report`'s word and character counts. Validations up to
    `frozen_until`, a search's last step with pi not yet moved (`--arch_freeze_steps`),
    are scored by `while_frozen` instead of `evaluator` (`expected_evaluator`: the argmax
    of an unmoved pi is each block's first candidate, a stack the mixture never trains
    alone).
    """

    def __init__(
        self,
        progress: RunProgress,
        writer: Any,
        evaluator: Evaluator,
        dataset: Any,
        eval_every: int = 0,
        text_counts: dict[str, int | None] | None = None,
        frozen_until: int = 0,
        while_frozen: Any = None,
        num_batches: int = 0,
    ) -> None:
        super().__init__(progress, eval_every)
        self.num_batches = num_batches
        self.writer = writer
        self.evaluator = evaluator
        self.frozen_until = frozen_until
        self.while_frozen = while_frozen
        self.dataset = dataset
        self.text_counts = text_counts or {}
        self.report: dict[str, Any] | None = None
        self.report_step: int | None = None

    def due(self, previous: int, step: int) -> bool:
        # The epoch end validates anyway: not twice at the same step.
        return super().due(previous, step) and step < self._epoch_end()

    def _epoch_end(self) -> int:
        return self.progress.epoch * self.progress.batches_per_epoch + self.progress.segment.limit

    def on_interval(self, step: int, logs: dict[str, Any] | None) -> None:
        self.validate(step)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.model.stop_training:
            return  # stopped by a NaN or a signal: leave quickly
        report = self.validate(self.progress.global_step)
        if logs is not None:
            logs["val_loss"] = report["loss"]
            logs["val_perplexity"] = report["perplexity"]

    def validate(self, step: int) -> dict[str, Any]:
        """Scores the split now and records the figures at `step`."""
        start = time.perf_counter()
        attach_fit_state(getattr(self.evaluator, "model", None))  # JAX: fit's current weights
        evaluator, how = self.evaluator, ""
        if self.while_frozen is not None and step <= self.frozen_until:
            evaluator = self.while_frozen
            how = f" with expected block weights (pi frozen until step {self.frozen_until})"
        report = score(
            evaluator,
            self.dataset,
            f"valid at step {step:,}",
            self.num_batches,
            self.progress.tokens_per_batch,
            self.text_counts,
        )
        # A figure of other block weights than the run's own is not its final figure.
        self.report, self.report_step = report, (step if evaluator is self.evaluator else None)
        scalars = {
            name: value
            for name, value in report.items()
            if not name.startswith("num_") and value is not None and math.isfinite(value)
        }
        write_scalars(self.writer, step, scalars)
        self.writer.flush()
        accuracy = report.get("accuracy")  # a recall task's exact answers
        logger.info(
            "validation at step %d%s: loss %.4f, perplexity %.2f (original's figure %.2f)%s in "
            "%.1fs",
            step,
            how,
            report["loss"],
            report["perplexity"],
            report["perplexity_original"],
            "" if accuracy is None else f", accuracy {100 * accuracy:.2f}%",
            time.perf_counter() - start,
        )
        return report
