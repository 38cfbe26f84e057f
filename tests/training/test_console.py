"""ConsoleProgress: the compile notice at once, then plain step/ETA lines off a terminal."""

from __future__ import annotations

import io
import re

from partf.training.console import ConsoleProgress, clock_text
from partf.training.progress import RunProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _console(terminal: bool) -> tuple[ConsoleProgress, RunProgress, Clock, io.StringIO]:
    progress, clock, stream = RunProgress(100, 1000, 64), Clock(), io.StringIO()
    console = ConsoleProgress(
        progress, 10, True, every_seconds=30, stream=stream, is_terminal=terminal, clock=clock
    )
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


def test_clock_text():
    assert [clock_text(s) for s in (0, 59.6, 3600, 90061)] == [
        "0:00:00",
        "0:01:00",
        "1:00:00",
        "25:01:01",
    ]
