"""Shared fixtures: where the reference data lives, and deterministic seeds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout holds WikiText-2 valid/test text and the
# original project's artifacts. Users do not have it: tests that need it skip.
SHARED_DATA = Path(os.environ.get("PARTF_SHARED_DATA", ROOT.parent / "shared" / "data"))
ORIGINAL = SHARED_DATA / "par-transformer-xl-original"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def original_artifacts(shared_data: Path) -> Path:
    if not ORIGINAL.is_dir():
        pytest.skip(f"original project's artifacts {ORIGINAL} are absent")
    return ORIGINAL


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(1234)
    yield
