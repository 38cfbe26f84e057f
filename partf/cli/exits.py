"""How partf's commands end: one error line on stderr and an exit status.

Every command prints failures as `PROG: error: <one line>` and returns 2 for bad
usage, 1 for a failure while running, 130 for Ctrl-C (128 + N for signal N); with
`--verbose` the traceback comes first. The pieces here are the ones the commands
share, so the wording and the statuses stay the same across them.

A command's error line is the only line it prints: `quiet_tensorflow` hides the log lines
TensorFlow's C++ code writes while it loads, which its log level does not reach.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

from partf.lazy import ImportHook, hooked

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


#: The level `quiet_tensorflow` gives TensorFlow's own logging when the user set none:
#: errors only, as TF_CPP_MIN_LOG_LEVEL=2 (1 would keep warnings, 3 fatal errors only).
QUIET_LEVEL = 2

#: Run in a child Python while TensorFlow loads, between the pipe now on fd 2 and the
#: real stderr: it passes every line on, as it comes, except log lines (absl's
#: "I0000 00:00:1795732924.341002 4633 port.cc:153] ...") below the level in argv[1] and
#: absl's notice that logs go to stderr. A separate process keeps forwarding while the
#: importing thread holds the GIL, and still delivers what it got if TensorFlow aborts
#: the process (a fatal line goes through). Two kinds of error line count as information:
#: the cuInit failure that follows TensorFlow's own "Could not find cuda drivers" notice
#: (it says the same again), and GPU builds' "Unable to register cuDNN factory: ... when
#: one has already been registered" (a second registration, ignored).
_FILTER = r"""
import re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
level = int(sys.argv[1])
header = re.compile(rb"([IWEF])\d{4} [\d:.]+ +\d+ [^\]\s]+:\d+\] ")
notice = b"WARNING: All log messages before absl::InitializeLog() is called"
registered_twice = b"when one has already been registered"
no_driver = False
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    found = header.match(line)
    if found:
        severity = b"IWEF".index(found.group(1))
        if b"Could not find cuda drivers" in line:
            no_driver = True
        if (no_driver and b"failed call to cuInit" in line) or registered_twice in line:
            severity = 0
        if severity < level:
            continue
    elif line.startswith(notice) and level > 0:
        continue
    out.write(line)
    out.flush()
"""


def tensorflow_log_level(verbose: bool) -> int:
    """The lowest severity of TensorFlow's start-up lines a command shows: 0 (all) with
    --verbose, else the user's TF_CPP_MIN_LOG_LEVEL, else `QUIET_LEVEL`."""
    if verbose:
        return 0
    try:
        return int(os.environ["TF_CPP_MIN_LOG_LEVEL"])
    except (KeyError, ValueError):
        return QUIET_LEVEL


@contextlib.contextmanager
def filtered_stderr(level: int) -> Iterator[None]:
    """Sends what the process writes to fd 2 (C++ code included) through `_FILTER` while
    the block runs, then puts fd 2 back. Where the filter cannot start, the block runs
    with stderr as it was."""
    import subprocess

    sys.stderr.flush()
    real = child = None
    with contextlib.suppress(OSError, ValueError):  # no stderr, or no child process
        real = os.dup(2)
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _FILTER, str(level)],
            stdin=subprocess.PIPE,
            stdout=real,
            stderr=real,
            start_new_session=True,  # Ctrl-C stops the command, not its filter
        )
    if child is None:
        if real is not None:
            os.close(real)
        yield
        return
    try:
        os.dup2(child.stdin.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)
        os.close(real)
        child.stdin.close()  # the filter sees the end, passes the rest on and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            # A process started meanwhile may hold the pipe open; don't wait on it.
            child.wait(timeout=10)


def quiet_tensorflow(verbose: bool) -> None:
    """Hides TensorFlow's start-up lines (absl's notice, oneDNN's, "Could not find cuda
    drivers") when TensorFlow is first imported, and sets TensorFlow's own log level, unless
    `verbose` or the user's TF_CPP_MIN_LOG_LEVEL asks for them.

    TF_CPP_MIN_LOG_LEVEL does not reach those lines: TensorFlow's libraries write them
    through absl before absl's logging is set up, on fd 2. So the import runs with fd 2
    through a filter (`filtered_stderr`), dropping log lines below the level and passing
    everything else on (Python's warnings and tracebacks, error lines). Nothing changes
    what TensorFlow computes: oneDNN stays on. Call it before anything imports
    TensorFlow; once it is imported, this does nothing.
    """
    level = tensorflow_log_level(verbose)
    if level <= 0 or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", str(QUIET_LEVEL))
    if hooked("tensorflow"):
        return

    def run(execute: Any, module: Any) -> None:
        with filtered_stderr(level):
            execute(module)
            # Where there is no CUDA driver this logs an error that only restates it.
            with contextlib.suppress(Exception):
                module.config.list_physical_devices("GPU")

    sys.meta_path.insert(0, ImportHook("tensorflow", run))
