"""The exceptions the data pipeline raises for problems a user can fix."""

from __future__ import annotations


class DataError(ValueError):
    """A problem with the input data or the environment, found while working.

    The message is one line that names the problem and the fix. The command
    line prints it without a traceback and exits with status 1.
    """


class UsageError(DataError):
    """A bad argument: a non-positive size, a missing path, an output in the way.

    The command line prints it without a traceback and exits with status 2.
    """
