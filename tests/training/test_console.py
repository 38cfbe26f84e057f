"""ConsoleProgress: the compile notice at once, then plain step/ETA lines off a terminal."""

from __future__ import annotations

import io
import re

from partf.console import Meter
from partf.training.console import ConsoleProgress, clock_text
from partf.training.progress import RunProgress


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


def test_clock_text():
    assert [clock_text(s) for s in (0, 59.6, 3600, 90061)] == [
        "0:00:00",
        "0:01:00",
        "1:00:00",
        "25:01:01",
    ]


# ------------------------------------------------------------- Meter (partf.console)
def _meter(terminal: bool) -> tuple[Meter, Clock, io.StringIO]:
    clock, stream = Clock(), io.StringIO()
    meter = Meter(
        "scoring valid (argmax weights)",
        24,
        "batches",
        tokens_per_unit=1024,
        every_seconds=10,
        stream=stream,
        is_terminal=terminal,
        clock=clock,
    )
    return meter, clock, stream


def test_a_meter_says_what_runs_then_count_and_eta_then_done():
    meter, clock, stream = _meter(terminal=False)
    meter.begin()
    for done in range(2, 26, 2):  # 2 batches every 3 s; the first update compiles
        clock.now += 3.0
        meter.advance(min(done, 24))
    meter.end("perplexity 123.45")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "partf: scoring valid (argmax weights): 24 batches"
    # At most one line per 10 s; rates from the first update on: 2 batches / 3 s.
    assert lines[1] == (
        "partf: scoring valid (argmax weights): 8/24 (33.3%), 0.67 batches/s "
        "(683 tok/s), elapsed 0:00:12, ETA 0:00:24"
    )
    assert len(lines) == 5
    assert all(re.search(r"\d+/24 .*ETA \d+:\d\d:\d\d$", line) for line in lines[1:-1])
    assert lines[-1] == "partf: scoring valid (argmax weights): done in 36.0 s, perplexity 123.45"


def test_a_short_pass_shows_only_its_first_and_last_lines():
    meter, clock, stream = _meter(terminal=False)
    meter.begin()
    for done in (12, 24):
        clock.now += 2.0
        meter.advance(done)
    meter.end()
    assert stream.getvalue().splitlines() == [
        "partf: scoring valid (argmax weights): 24 batches",
        "partf: scoring valid (argmax weights): done in 4.0 s",
    ]


def test_on_a_terminal_a_meter_rewrites_one_line_in_place():
    meter, clock, stream = _meter(terminal=True)
    meter.begin()
    for done in (8, 16, 24):
        clock.now += 1.0  # updates at once on a terminal, however close
        meter.advance(done)
    meter.end("perplexity 9.00")
    text = stream.getvalue()
    assert text.count("\n") == 2  # the notice and the done line
    shown = text.split("\n")[1].split("\r")
    assert shown[1].startswith("partf: scoring valid (argmax weights): 16/24 (66.7%)")
    assert shown[2].startswith("partf: scoring valid (argmax weights): 24/24 (100.0%)")
    assert shown[-1] == "partf: scoring valid (argmax weights): done in 3.0 s, perplexity 9.00"
    assert shown[-2].strip() == ""  # the progress line blanked before the done line
