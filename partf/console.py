"""Progress on the console for work that takes a while: lines that start "partf: " on
stderr, with a count, a rate and an ETA, the same for every command (training's own in
`partf.training.callbacks.console_progress`; evaluation passes, tokenizing and writing
records through `Meter`):

    partf: scoring valid (argmax weights): 128/304 (42.1%), 7.61 batches/s
           (7,793 tok/s), elapsed 0:00:19, ETA 0:00:23           [one line]

Into a file or a pipe a line comes at most every `EVERY_SECONDS`; on a terminal it is
rewritten in place. The lines bypass `logging`, so the logs keep what they had. Rates
start after the first update, which often carries a compilation.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

#: Least seconds between two plain progress lines of a `Meter` (not on a terminal).
EVERY_SECONDS = 10.0


def clock_text(seconds: float) -> str:
    """Seconds as H:MM:SS (hours unbounded)."""
    whole = max(int(round(seconds)), 0)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def write_line(text: str, stream: TextIO | None = None) -> None:
    """Writes "partf: <text>" as one line (default stream: sys.stderr, read now)."""
    stream = stream or sys.stderr
    stream.write(f"partf: {text}\n")
    stream.flush()


def rate_text(
    done: int,
    total: int,
    rate: float,
    unit: str,
    elapsed: float,
    tokens_per_unit: float = 0,
    detail: str = "",
) -> str:
    """The body of every progress line: "done/total (share)<detail>, rate (tok/s),
    elapsed, ETA". `rate` is units per second (0: not known yet, "ETA unknown");
    `tokens_per_unit` 0 leaves out the tokens per second."""
    eta = clock_text((total - done) / rate) if rate > 0 else "unknown"
    tokens = f" ({rate * tokens_per_unit:,.0f} tok/s)" if tokens_per_unit else ""
    return (
        f"{done:,}/{total:,} ({100.0 * done / max(total, 1):.1f}%){detail}, "
        f"{rate:.2f} {unit}/s{tokens}, elapsed {clock_text(elapsed)}, ETA {eta}"
    )


class Meter:
    """Progress lines of `total` units of counted work: what it is (`what`, e.g. "scoring
    valid (argmax weights)", starts every line), how far, how fast (`unit`, plural, per
    second; tokens per second with `tokens_per_unit`). Call `begin()` to say what starts
    (optional), `advance(done)` after each piece of work, and `end()` when it is over.
    `stream` defaults to sys.stderr, read when writing; `is_terminal` (rewrite one line in
    place) to whether the stream is one; `clock` (monotonic seconds) is for tests.
    """

    def __init__(
        self,
        what: str,
        total: int,
        unit: str,
        tokens_per_unit: float = 0,
        every_seconds: float | None = None,
        stream: TextIO | None = None,
        is_terminal: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.tokens_per_unit = tokens_per_unit
        self.every_seconds = EVERY_SECONDS if every_seconds is None else every_seconds
        self.stream = stream
        if is_terminal is None:
            isatty = getattr(stream or sys.stderr, "isatty", None)
            is_terminal = bool(isatty and isatty())
        self.is_terminal = is_terminal
        self.clock = clock
        self.began = clock()
        self._first: tuple[int, float] | None = None  # (done, time) at the first update
        self._last_line = self.began
        self._shown = 0  # characters of the in-place line on a terminal

    def begin(self, note: str = "") -> None:
        """Says what starts: "<what>: <total> <unit><note>"."""
        self.began = self._last_line = self.clock()
        self._write(f"{self.what}: {self.total:,} {self.unit}{note}")

    def advance(self, done: int) -> None:
        """Records that `done` units of `total` are done; writes a line when one is due."""
        now = self.clock()
        if self._first is None:
            self._first = (done, now)  # rates start here (the first piece may compile)
            return
        if not self.is_terminal and now - self._last_line < self.every_seconds:
            return
        self._last_line = now
        text = self.line(done, now)
        if self.is_terminal:
            self._in_place(text)
        else:
            self._write(text)

    def line(self, done: int, now: float) -> str:
        """The progress line after `done` units at time `now`."""
        first_done, first_time = self._first or (done, now)
        rate = (done - first_done) / (now - first_time) if now > first_time else 0.0
        body = rate_text(done, self.total, rate, self.unit, now - self.began, self.tokens_per_unit)
        return f"{self.what}: {body}"

    def end(self, result: str = "") -> None:
        """Ends the work: "<what>: done in <seconds> s[, <result>]" (replacing the line
        in place on a terminal)."""
        seconds = self.clock() - self.began
        self._in_place("")
        self._write(f"{self.what}: done in {seconds:.1f} s" + (f", {result}" if result else ""))

    def _write(self, text: str) -> None:
        write_line(text, self.stream)

    def _in_place(self, text: str) -> None:
        """Rewrites the terminal's current line with `text` (blank it with "")."""
        if not self.is_terminal or not (text or self._shown):
            return
        line = f"partf: {text}" if text else ""
        stream = self.stream or sys.stderr
        # Spaces over what is left of a longer previous line; "" returns to column 0.
        stream.write("\r" + line.ljust(self._shown) + ("" if text else "\r"))
        stream.flush()
        self._shown = len(line)
