"""What the script tests share: running a script in a clean environment beside stubs that
log their command lines, and the stamp by which setup_env.sh knows an install is done."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

# A stand-in for a command of .venv/bin: logs its name and arguments to .venv/calls.log.
LOGGING_STUB = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/../calls.log"
"""


def run_logged(
    argv: list[str], cwd: Path, env: dict[str, str], log: Path
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Runs argv after clearing `log`; returns the process and the lines the stubs logged."""
    log.unlink(missing_ok=True)
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    return done, log.read_text().splitlines() if log.exists() else []


def stamp(project: Path, extras: str) -> Path:
    """Marks project/.venv as holding the install of its setup.py with `extras`."""
    digest = hashlib.sha256((project / "setup.py").read_bytes()).hexdigest()[:16]
    path = project / ".venv" / f".partf-installed-{digest}-{extras}"
    path.touch()
    return path
