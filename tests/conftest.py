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


# Files of long, independent tests that share nothing costly to build. scripts/run_tests.sh
# keeps each test file on one worker (`--dist loadfile`), so that its module-scoped
# fixtures (trained models, written records) are built once; these files' tests go to the
# workers one by one instead, so that one file does not hold a worker for the whole run.
SPREAD_FILES = frozenset({"tests/attention/test_numerics.py"})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile`, with the tests of SPREAD_FILES each a unit of work of its own.

    pytest-xdist's `loadgroup` would say this with marks, but it groups by renaming the
    tests, which pytest 9 ignores: under pytest 9.2 and pytest-xdist 3.8 its marks change
    nothing, and a file's tests go to any worker."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SpreadSomeFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path in SPREAD_FILES else path

    return SpreadSomeFiles(config, log)


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
