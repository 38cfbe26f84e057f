"""Shared fixtures: where the reference data lives, and deterministic seeds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from partf.cli.exits import quiet_tensorflow
from tests.shared_data import absent, original_dir, shared_data_dir

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow's C++ start-up lines (absl's notice, oneDNN, "Could not find cuda drivers")
# go to fd 2 before its log level applies, and pytest does not capture them when a
# folder's conftest imports TensorFlow during collection: filter them as the commands do.
# TF_CPP_MIN_LOG_LEVEL=0 shows them.
quiet_tensorflow(verbose=False)

# The shared folder ($PARTF_SHARED_DATA, else ../shared/data) holds WikiText-2's train,
# valid and test text and the original project's artifacts. Users do not have it: tests that need
# it skip, or fail under PARTF_REQUIRE_SHARED_DATA=1 (tests/shared_data.py).
SHARED_DATA = shared_data_dir()
ORIGINAL = original_dir()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        absent(f"reference data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def original_artifacts(shared_data: Path) -> Path:
    if not ORIGINAL.is_dir():
        absent(f"original project's artifacts {ORIGINAL} are absent")
    return ORIGINAL


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(1234)
    yield
