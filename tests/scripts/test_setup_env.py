"""scripts/setup_env.sh installs only when needed, and says so only then: an install that
already holds every extra asked for (the test suite's, for base_model.sh) is reused
silently. Run with a fake .venv whose python logs its calls instead of running pip."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.scripts.helpers import LOGGING_STUB, stamp

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of setup_env.sh beside a setup.py, with a fake venv in .venv."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "setup_env.sh", tmp_path / "scripts" / "setup_env.sh")
    (tmp_path / "setup.py").write_text("# setup\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(LOGGING_STUB)
    python.chmod(0o755)
    return tmp_path


def source(project: Path, extras: str) -> tuple[str, list[str]]:
    """Sources setup_env.sh with PARTF_EXTRAS; returns its stderr and the pip calls."""
    done = subprocess.run(
        ["bash", "-c", f"PARTF_EXTRAS={extras} source scripts/setup_env.sh"],
        cwd=project,
        env={"PATH": "/usr/bin:/bin", "HOME": str(project)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    log = project / ".venv" / "calls.log"
    return done.stderr, log.read_text().splitlines() if log.exists() else []


def test_the_test_install_serves_the_base_one_silently(project):
    stamp(project, "test")
    assert source(project, "") == ("", [])
    assert source(project, "test") == ("", [])


def test_a_missing_extra_is_installed_and_said_once(project):
    stamp(project, "base")
    err, calls = source(project, "test")
    assert err.splitlines() == [
        "partf: updating the install of partf[test] (setup.py or the extras changed)"
    ]
    assert calls[-1] == "python -m pip install --quiet -e .[test]"
    assert source(project, "test") == ("", calls)  # stamped: not again


def test_a_first_install_says_it_downloads_tensorflow(project):
    err, calls = source(project, "")
    assert err.splitlines() == [
        "partf: installing partf (first run downloads TensorFlow, a few minutes)"
    ]
    assert calls[-1] == "python -m pip install --quiet -e ."
