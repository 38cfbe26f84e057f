"""The errors partf raises for problems a user can fix, for every package.

`DataError` (exit status 1) and `UsageError` (exit status 2) are the bases the command
lines turn into one-line messages; each package derives its own from them.
"""

from __future__ import annotations

import errno


class DataError(ValueError):
    """A problem with the input data or the environment, found while working.

    The message is one line that names the problem and the fix. The command
    line prints it without a traceback and exits with status 1.
    """


class UsageError(DataError):
    """A bad argument: a non-positive size, a missing path, an output in the way.

    The command line prints it without a traceback and exits with status 2.
    """


class ConfigError(UsageError):
    """A bad setting or combination of settings of a run (`partf.training.config`); the
    command line exits with status 2."""


def os_error_message(error: OSError, what: str, full_fix: str) -> str:
    """One line for a failed write or read, with the fix for the usual causes: `what` was
    being done names it when the error carries no file name; `full_fix` is what to do when
    the disk (or quota) is full."""
    where = error.filename or what
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on the device ({where}); {full_fix}"
    return f"{error.strerror or error} ({where}); check the path and its permissions"
