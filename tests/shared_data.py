"""Reference data for tests: the lookup of benchmarks/shared_data.py, and what a test
does when the data is absent (skip, or fail under PARTF_REQUIRE_SHARED_DATA=1)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from benchmarks.shared_data import data_required, original_dir, shared_data_dir, wikitext2_dir

__all__ = ["absent", "original_dir", "shared_data_dir", "wikitext2_file"]


def absent(message: str) -> NoReturn:
    """Skips the test, or fails it when the environment requires the shared data."""
    if data_required():
        pytest.fail(f"{message}, and PARTF_REQUIRE_SHARED_DATA=1 requires it", pytrace=False)
    pytest.skip(message)


def wikitext2_file(name: str) -> Path:
    """The shared WikiText-2 split `name` (e.g. "train.txt"), or `absent` when it is missing.

    Checked per file, not per folder: an older shared folder has valid.txt and test.txt
    but no train.txt, and a test of train.txt must skip there, not fail on a missing file.
    """
    path = wikitext2_dir() / name
    if not path.is_file():
        absent(f"WikiText-2 {name} is absent from {path.parent}")
    return path
