"""scripts/run_tests.sh spreads the test files over one pytest-xdist worker per core, at
most 4, keeps each file on one worker, and lets PARTF_TEST_WORKERS or a `-n` of the
caller decide. Run in a copy of the scripts with a fake .venv whose python, ruff and
nproc log or answer instead of running anything."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.scripts.helpers import LOGGING_STUB, run_logged, stamp

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """run_tests.sh and setup_env.sh beside a setup.py whose test install is stamped done."""
    (tmp_path / "scripts").mkdir()
    for name in ("run_tests.sh", "setup_env.sh"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    (tmp_path / "setup.py").write_text("# setup\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "ruff"):
        (bin_dir / name).write_text(LOGGING_STUB)
        (bin_dir / name).chmod(0o755)
    stamp(tmp_path, "test")
    return tmp_path


def run_tests(project: Path, *args: str, cores: int, workers: str | None = None):
    """Runs run_tests.sh on a machine of `cores` cores; returns it and the pytest call."""
    nproc = project / ".venv" / "bin" / "nproc"
    nproc.write_text(f"#!/usr/bin/env bash\necho {cores}\n")
    nproc.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(project)}
    if workers is not None:
        env["PARTF_TEST_WORKERS"] = workers
    log = project / ".venv" / "calls.log"
    done, calls = run_logged(["bash", "scripts/run_tests.sh", *args], project, env, log)
    return done, [call for call in calls if call.startswith("python -m pytest")]


@pytest.mark.parametrize(
    "cores, expected",
    [
        (1, "python -m pytest -m slow"),
        (2, "python -m pytest -n 2 --dist loadfile -m slow"),
        (16, "python -m pytest -n 4 --dist loadfile -m slow"),
    ],
)
def test_one_worker_per_core_at_most_four(project, cores, expected):
    done, calls = run_tests(project, "-m", "slow", cores=cores)
    assert done.returncode == 0, done.stderr
    assert calls == [expected]


def test_the_callers_worker_count_wins(project):
    _, calls = run_tests(project, cores=2, workers="0")
    assert calls == ["python -m pytest"]
    _, calls = run_tests(project, cores=2, workers="3")
    assert calls == ["python -m pytest -n 3 --dist loadfile"]
    # pytest keeps the last -n it is given, and the caller's comes after the script's.
    _, calls = run_tests(project, "-n", "0", cores=2)
    assert calls == ["python -m pytest -n 2 --dist loadfile -n 0"]


def test_a_worker_count_that_is_not_a_number_stops_with_one_line(project):
    done, calls = run_tests(project, cores=2, workers="two")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "partf: PARTF_TEST_WORKERS must be a whole number of worker processes "
        "(0 runs the tests in one process), not 'two'"
    ]
    assert calls == []
