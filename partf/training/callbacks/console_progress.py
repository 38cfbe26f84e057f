"""Progress on the console while `fit` runs: what is being compiled, then plain lines
with the step and an ETA when the output is not a terminal.

Before fit shows anything the train step is traced and compiled (tens of seconds on 2
CPU cores), and off a terminal fit writes one line per epoch (minutes apart on
WikiText-2). This callback says what is compiling when training starts and, off a
terminal, writes a line every `every_seconds` (stderr only, in the `partf.console`
style of every progress line):

    partf: step 256/600 (42.7%), epoch 1, loss 7.9383, lr 6.38e-06, tau 0.374, 8.10 steps/s
    (8,290 tok/s), elapsed 0:02:28, ETA 0:00:42                                [one line]
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TextIO

import keras

from partf.console import rate_text, write_line
from partf.training.run_state import RunProgress, read_loss, read_tau


class ConsoleProgress(keras.callbacks.Callback):
    """Writes the compile notice, then (off a terminal) periodic step/ETA lines, at least
    `every_seconds` apart, to `stream` (default sys.stderr, read when writing).

    `progress` is kept current by `ProgressTracker`, which runs before this callback.
    `is_terminal`: whether fit shows its own progress bar (default: stdout is a terminal,
    as `run_fit` decides fit's verbosity). `lr_value`: step -> learning rate (host
    arithmetic), shown with the loss and tau; None leaves the rate out.
    """

    def __init__(
        self,
        progress: RunProgress,
        steps_per_execution: int,
        jit_compile: bool,
        every_seconds: float = 30.0,
        stream: TextIO | None = None,
        is_terminal: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        lr_value: Callable[[int], float] | None = None,
    ) -> None:
        super().__init__()
        self.progress = progress
        self.steps_per_execution = steps_per_execution
        self.jit_compile = jit_compile
        self.every_seconds = every_seconds
        self.stream = stream
        self.is_terminal = os.isatty(1) if is_terminal is None else is_terminal
        self.clock = clock
        self.lr_value = lr_value
        self._began: float | None = None  # when the first `fit` began
        self._timed: tuple[int, float] | None = None  # (step, time) after the compilation
        self._last_line = 0.0

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self._began is not None:
            return  # a later segment of the run: the step is compiled already
        self._began = self.clock()
        how = "XLA" if self.jit_compile else "graph, no XLA"
        write_line(
            f"compiling the train step ({how}, {self.steps_per_execution} steps per "
            f"execution) before step {self.progress.global_step:,} of "
            f"{self.progress.total_steps:,}; progress follows the first execution",
            self.stream,
        )

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now, step = self.clock(), self.progress.global_step
        if self._timed is None:
            # The first execution carries the tracing and compilation: rates start after it.
            self._timed, self._last_line = (step, now), now
            if not self.is_terminal:
                done = now - (self._began or now)
                write_line(f"first execution done in {done:.1f} s; training", self.stream)
            return
        if self.is_terminal:
            # fit's bar (the last callback) shows what `logs` holds after this one: add
            # lr, tau and tok/s there. Reading tau syncs the device, so at most every 2 s;
            # the bar keeps a value until it is given a new one.
            if logs is not None and now - self._last_line >= 2.0:
                self._last_line = now
                logs.update(self.bar_values(step, now))
            return
        if now - self._last_line < self.every_seconds:
            return
        self._last_line = now
        write_line(self.line(step, now, logs), self.stream)

    def _rate(self, step: int, now: float) -> float:
        """Steps per second since the first execution ended (0 before that)."""
        first_step, first_time = self._timed or (step, now)
        return (step - first_step) / (now - first_time) if now > first_time else 0.0

    def _lr_and_tau(self, step: int) -> dict[str, float]:
        """The learning rate of the update that made `step` and the model's tau, where
        known (no lr_value, no model, or a fixed encoder without tau: left out)."""
        values = {}
        if self.lr_value is not None:
            values["lr"] = float(self.lr_value(max(step - 1, 0)))
        tau = read_tau(self.model)
        if tau is not None:
            values["tau"] = tau
        return values

    def bar_values(self, step: int, now: float) -> dict[str, float]:
        """What this callback adds to fit's bar on a terminal: lr, tau and tok/s."""
        values = self._lr_and_tau(step)
        rate = self._rate(step, now)
        if rate > 0:
            values["tok/s"] = round(rate * self.progress.tokens_per_batch)
        return values

    def line(self, step: int, now: float, logs: dict[str, Any] | None = None) -> str:
        """The plain progress line at `step`: count, share, epoch, loss, lr and tau (where
        known), rate, elapsed and ETA."""
        elapsed = now - (self._began if self._began is not None else now)
        detail = f", epoch {self.progress.epoch + 1}"
        loss = read_loss(logs)
        if loss is not None:
            detail += f", loss {loss:.4f}"
        values = self._lr_and_tau(step)
        if "lr" in values:
            detail += f", lr {values['lr']:.3g}"
        if "tau" in values:
            detail += f", tau {values['tau']:.3g}"
        return "step " + rate_text(
            step,
            self.progress.total_steps,
            self._rate(step, now),
            "steps",
            elapsed,
            self.progress.tokens_per_batch,
            detail,
        )
