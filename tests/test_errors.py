"""The errors a user can fix, and `os_error_message`'s one line for a failed read or write."""

from __future__ import annotations

import errno

import pytest

from partf.errors import DataError, UsageError, os_error_message


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_full_disk_or_quota_names_the_file_and_the_fix(code):
    error = OSError(code, "No space left on device", "/out/ckpt.npz")
    message = os_error_message(error, "writing the checkpoint", "free some space and rerun")
    assert message == "no space left on the device (/out/ckpt.npz); free some space and rerun"


def test_other_failures_name_the_cause_and_say_what_to_check():
    error = OSError(errno.EACCES, "Permission denied", "/out")
    assert os_error_message(error, "writing", "free space") == (
        "Permission denied (/out); check the path and its permissions"
    )
    # Without a file name (or a strerror) the message names what was being done.
    bare = OSError("disk went away")
    assert os_error_message(bare, "writing the records", "free space") == (
        "disk went away (writing the records); check the path and its permissions"
    )
    full = OSError(errno.ENOSPC, "No space left on device")
    assert os_error_message(full, "writing the records", "free space").startswith(
        "no space left on the device (writing the records); free space"
    )


def test_a_usage_error_is_a_data_error_and_a_value_error():
    """The command lines catch DataError (exit 1) after UsageError (exit 2); code that
    expects a ValueError still catches both."""
    assert issubclass(UsageError, DataError) and issubclass(DataError, ValueError)
