"""Progress on the console while `fit` runs: what is being compiled, then plain lines
with the step and an ETA when the output is not a terminal.

On a terminal Keras's progress bar (fit's verbose=1) updates in place with its own ETA;
into a file or a pipe fit writes one line per epoch (verbose=2), which on WikiText-2 is
one line every few minutes. And before either shows anything the train step is traced
and compiled (XLA), tens of seconds on 2 CPU cores, with nothing on the screen. This
callback says so when training starts and, when the output is not a terminal, writes a
plain line every `every_seconds` at the end of an execution (each line starts "partf: "):

    compiling the train step (XLA, 32 steps per execution) before step 0 of 9,120; ...
    first execution done in 41.2 s; training
    step 1,024/9,120 (11.2%), epoch 1, 5.21 steps/s (5,335 tok/s), elapsed 0:03:16, ETA 0:25:54

The lines go to stderr only: training.log and TensorBoard keep what MetricsLogger writes.
They are written like every other partf progress line (`partf.console`: evaluation
passes, record building), with the same rate and ETA text.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TextIO

import keras

from partf.console import clock_text, rate_text, write_line
from partf.training.progress import RunProgress

__all__ = ["ConsoleProgress", "clock_text"]


class ConsoleProgress(keras.callbacks.Callback):
    """Writes the compile notice, then (off a terminal) periodic step/ETA lines.

    Args:
        progress: the run's position (kept current by `ProgressTracker`, which runs
            before this callback).
        steps_per_execution: train steps per compiled call, named in the notice.
        jit_compile: whether the step is compiled with XLA, named in the notice.
        every_seconds: least time between two plain lines.
        stream: where the lines go (default sys.stderr, read when writing).
        is_terminal: whether fit shows its own progress bar (default: stdout is a
            terminal, as `run_fit` decides fit's verbosity).
        clock: seconds, monotonic (for tests).
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
    ) -> None:
        super().__init__()
        self.progress = progress
        self.steps_per_execution = steps_per_execution
        self.jit_compile = jit_compile
        self.every_seconds = every_seconds
        self.stream = stream
        self.is_terminal = os.isatty(1) if is_terminal is None else is_terminal
        self.clock = clock
        self._began: float | None = None  # when the first `fit` began
        self._timed: tuple[int, float] | None = None  # (step, time) after the compilation
        self._last_line = 0.0

    def _write(self, text: str) -> None:
        write_line(text, self.stream)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self._began is not None:
            return  # a later segment of the run: the step is compiled already
        self._began = self.clock()
        how = "XLA" if self.jit_compile else "graph, no XLA"
        self._write(
            f"compiling the train step ({how}, {self.steps_per_execution} steps per "
            f"execution) before step {self.progress.global_step:,} of "
            f"{self.progress.total_steps:,}; progress follows the first execution"
        )

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now, step = self.clock(), self.progress.global_step
        if self._timed is None:
            # The first execution carries the tracing and compilation: rates start after it.
            self._timed, self._last_line = (step, now), now
            if not self.is_terminal:
                self._write(f"first execution done in {now - (self._began or now):.1f} s; training")
            return
        if self.is_terminal or now - self._last_line < self.every_seconds:
            return
        self._last_line = now
        self._write(self.line(step, now))

    def line(self, step: int, now: float) -> str:
        """The plain progress line at `step`: count, share, rate, elapsed and ETA."""
        total = self.progress.total_steps
        first_step, first_time = self._timed or (step, now)
        rate = (step - first_step) / (now - first_time) if now > first_time else 0.0
        elapsed = now - (self._began if self._began is not None else now)
        epoch = f", epoch {self.progress.epoch + 1}"
        return "step " + rate_text(
            step, total, rate, "steps", elapsed, self.progress.tokens_per_batch, epoch
        )
