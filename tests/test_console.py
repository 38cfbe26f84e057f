"""partf.console: the clock text, and `Meter`'s lines for a pass (what runs, the count
with a rate and an ETA, then done), plain or in place on a terminal."""

from __future__ import annotations

import io
import re

from partf.console import Meter, clock_text


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_clock_text():
    assert [clock_text(s) for s in (0, 59.6, 3600, 90061)] == [
        "0:00:00",
        "0:01:00",
        "1:00:00",
        "25:01:01",
    ]


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
