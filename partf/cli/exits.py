"""How partf's commands end: one error line on stderr and an exit status.

Every command prints failures as `PROG: error: <one line>` and returns 2 for bad
usage, 1 for a failure while running, 130 for Ctrl-C (128 + N for signal N); with
`--verbose` the traceback comes first. The pieces here are the ones the commands
share, so the wording and the statuses stay the same across them.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from collections.abc import Iterator, Sequence

VERBOSE_FLAGS = ("--verbose", "--verbose=true", "--verbose=True")


def wants_verbose(argv: Sequence[str]) -> bool:
    """Whether the command line asks for tracebacks, read before parsing (so that a
    parsing error can show its traceback too)."""
    return any(arg in VERBOSE_FLAGS for arg in argv)


def fail(prog: str, message: str, status: int, error: BaseException | None, verbose: bool) -> int:
    """Prints `prog: error: message` on one line (the traceback first when verbose);
    returns `status`."""
    if verbose and error is not None:
        traceback.print_exception(error)
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)
    return status


def unexpected(error: BaseException) -> str:
    """The one-line message for an error no command foresaw: a bug or an environment
    problem, so it points at --verbose."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"unexpected {type(error).__name__}: {first} (rerun with --verbose for the traceback)"


@contextlib.contextmanager
def package_logging(verbose: bool, fmt: str = "partf: %(message)s") -> Iterator[None]:
    """partf's log records on stderr while the command runs (debug when verbose); the
    logger is left as it was afterwards, so commands run in one process do not stack
    handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    package_logger = logging.getLogger("partf")
    package_logger.addHandler(handler)
    old_level = package_logger.level
    package_logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    try:
        yield
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(old_level)
