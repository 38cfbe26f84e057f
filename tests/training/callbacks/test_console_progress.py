"""ConsoleProgress: the compile notice at once, then plain step/ETA lines off a terminal."""

from __future__ import annotations

import io
import re

from partf.training.callbacks.console_progress import ConsoleProgress
from partf.training.run_state import RunProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _console(
    terminal: bool, lr_value=None, model=None
) -> tuple[ConsoleProgress, RunProgress, Clock, io.StringIO]:
    progress, clock, stream = RunProgress(100, 1000, 64), Clock(), io.StringIO()
    console = ConsoleProgress(
        progress,
        10,
        True,
        every_seconds=30,
        stream=stream,
        is_terminal=terminal,
        clock=clock,
        lr_value=lr_value,
    )
    if model is not None:
        console.set_model(model)
    return console, progress, clock, stream


def _execution(console, progress, clock, step: int, seconds: float) -> None:
    """An execution ends at `step`, `seconds` after the previous one."""
    clock.now += seconds
    progress.move_to(step)
    console.on_train_batch_end(step % 100)


def test_plain_lines_give_the_step_and_an_eta():
    console, progress, clock, stream = _console(terminal=False)
    console.on_train_begin()
    notice = stream.getvalue().splitlines()
    assert notice == [
        "partf: compiling the train step (XLA, 10 steps per execution) before step 0 of "
        "1,000; progress follows the first execution"
    ]
    _execution(console, progress, clock, 10, 40.0)  # the compilation
    assert stream.getvalue().splitlines()[1] == "partf: first execution done in 40.0 s; training"
    _execution(console, progress, clock, 20, 10.0)  # 1 step/s, before every_seconds
    assert len(stream.getvalue().splitlines()) == 2
    for step in range(30, 60, 10):
        _execution(console, progress, clock, step, 10.0)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3  # one line per 30 s
    # 30 steps in the 30 s after the compilation: 1 step/s, 960 steps to go.
    assert lines[2] == (
        "partf: step 40/1,000 (4.0%), epoch 1, 1.00 steps/s (64 tok/s), elapsed 0:01:10, "
        "ETA 0:16:00"
    )
    assert re.search(r"step \d[\d,]*/[\d,]+ .*ETA \d+:\d\d:\d\d$", lines[2])


def test_on_a_terminal_only_the_notice_is_written():
    """fit's progress bar shows steps and ETA there; lines would break it."""
    console, progress, clock, stream = _console(terminal=True)
    console.on_train_begin()
    for step in range(10, 200, 10):
        _execution(console, progress, clock, step, 20.0)
    console.on_train_begin()  # the next segment's fit: compiled already
    assert len(stream.getvalue().splitlines()) == 1
    assert "compiling the train step" in stream.getvalue()


class TauModel:
    """What ConsoleProgress reads of a model: its temperature."""

    def tau(self) -> float:
        return 0.5


def test_plain_lines_give_the_loss_lr_and_tau_where_known():
    console, progress, clock, stream = _console(
        terminal=False, lr_value=lambda step: 1e-4 * step / 1000, model=TauModel()
    )
    console.on_train_begin()
    for step, seconds in ((10, 40.0), (40, 30.0)):
        clock.now += seconds
        progress.move_to(step)
        console.on_train_batch_end(step, {"loss": 4.25})
    # lr of the update that made step 40 (step 39's); tau read from the model.
    assert stream.getvalue().splitlines()[-1] == (
        "partf: step 40/1,000 (4.0%), epoch 1, loss 4.2500, lr 3.9e-06, tau 0.5, "
        "1.00 steps/s (64 tok/s), elapsed 0:01:10, ETA 0:16:00"
    )


def test_on_a_terminal_fits_bar_gets_lr_tau_and_tokens_per_second():
    console, progress, clock, stream = _console(
        terminal=True, lr_value=lambda step: 2e-4, model=TauModel()
    )
    console.on_train_begin()
    first = {"loss": 5.0}
    clock.now += 40.0
    progress.move_to(10)
    console.on_train_batch_end(10, first)
    assert first == {"loss": 5.0}  # the compilation: no rate yet, nothing added
    logs = {"loss": 4.0}
    clock.now += 10.0
    progress.move_to(30)
    console.on_train_batch_end(30, logs)
    assert logs == {"loss": 4.0, "lr": 2e-4, "tau": 0.5, "tok/s": 128}
    assert len(stream.getvalue().splitlines()) == 1  # the notice only: the bar shows the rest
