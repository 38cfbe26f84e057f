"""Reference data for tests: the lookup of benchmarks/shared_data.py, and what a test
does when the data is absent (skip, or fail under PARTF_REQUIRE_SHARED_DATA=1)."""

from __future__ import annotations

from typing import NoReturn

import pytest

from benchmarks.shared_data import data_required, original_dir, shared_data_dir

__all__ = ["absent", "original_dir", "shared_data_dir"]


def absent(message: str) -> NoReturn:
    """Skips the test, or fails it when the environment requires the shared data."""
    if data_required():
        pytest.fail(f"{message}, and PARTF_REQUIRE_SHARED_DATA=1 requires it", pytrace=False)
    pytest.skip(message)
