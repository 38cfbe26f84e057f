"""The README's first command in a fresh clone with no network and no DATA_DIR:
`./base_model.sh` builds WikiText-2's records from the copy partf ships, trains, and the
commands it prints at the end run as printed.

The clone is of this checkout's HEAD (what is committed, not the working tree). It uses
the Python environment running the tests through a stand-in `PARTF_VENV` whose programs
call this environment's, with a stamp of the clone's setup.py, so that setup_env.sh
installs nothing (and never repoints this environment's install at the clone); the clone's
own code is imported (PYTHONPATH). The network is cut for Python's downloads (an HTTP(S)
proxy at a closed port) and for pip (PIP_NO_INDEX)."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from partf.data import WIKITEXT2_CHECKSUMS, verify_file

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = "partf/data/wikitext2/wikitext-2.tar.xz"
PROGRAMS = ("python", "partf-build-data", "partf-train", "partf-generate", "partf-evaluate")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stand_in_venv(folder: Path, clone: Path) -> Path:
    """A PARTF_VENV whose bin/ runs this environment's programs, marked as installed."""
    here = Path(sys.executable).parent
    (folder / "bin").mkdir(parents=True)
    for name in (*PROGRAMS, "tensorboard"):
        if not (here / name).exists():
            pytest.skip(f"{name} is not installed next to {sys.executable}")
        program = folder / "bin" / name
        program.write_text(f'#!/usr/bin/env bash\nexec {shlex.quote(str(here / name))} "$@"\n')
        program.chmod(0o755)
    digest = hashlib.sha256((clone / "setup.py").read_bytes()).hexdigest()[:16]
    (folder / f".partf-installed-{digest}-base").touch()
    return folder


def offline_env(clone: Path, venv: Path) -> dict[str, str]:
    proxy = f"http://127.0.0.1:{closed_port()}"
    env = {
        "PATH": f"/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(clone.parent),
        "PARTF_VENV": str(venv),
        "PYTHONPATH": str(clone),
        "PIP_NO_INDEX": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "no_proxy": "",
        "NO_PROXY": "",
    }
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = proxy
    return env


@pytest.mark.slow
def test_a_fresh_clone_trains_offline_on_the_shipped_wikitext2(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    tracked = subprocess.run(["git", "cat-file", "-e", f"HEAD:{ARCHIVE}"], cwd=ROOT)
    assert tracked.returncode == 0, f"{ARCHIVE} is not committed: a clone would lack it"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    venv = stand_in_venv(tmp_path / "venv", clone)
    env = offline_env(clone, venv)

    # Eight steps, and no scoring of valid and test inside the run (four passes over them,
    # most of the time): partf-evaluate scores the test split below, as printed.
    done = subprocess.run(
        ["./base_model.sh", "--valid_directory=", "--test_directory="],
        cwd=clone,
        env={**env, "MAX_STEPS": "8", "STEPS_PER_EXECUTION": "8"},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    err = done.stderr
    assert "partf: installing" not in err and "updating the install" not in err
    assert f"unpacking WikiText-2 from {clone / ARCHIVE}" in err
    assert "download" not in err.lower()
    text = clone / "data" / "wikitext-2"
    assert sorted(p.name for p in (clone / "data").iterdir() if p.name.startswith(".")) == []
    for name, checksum in WIKITEXT2_CHECKSUMS.items():
        assert verify_file(text / name, checksum), name
    assert "done: 8 steps" in err
    assert subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True,
                          text=True, check=True).stdout == ""  # fmt: skip

    # The next commands, as printed: each runs from the clone (no `cd` line, since it ran
    # there), tensorboard's log folder exists.
    printed = err[err.index("=== partf: done: the run is in") :].splitlines()[2:]
    commands = [shlex.split(line) for line in printed if line.startswith("  ")]
    assert [Path(argv[0]).name for argv in commands] == [
        "partf-generate",
        "partf-evaluate",
        "tensorboard",
    ]
    generate, evaluate, tensorboard = commands
    assert Path(generate[0]).parent == venv / "bin"
    for argv in (generate, evaluate):
        ran = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True,
                             timeout=900)  # fmt: skip
        assert ran.returncode == 0, (argv, ran.stderr[-3000:])
        assert ran.stdout.strip(), argv
    assert (clone / tensorboard[tensorboard.index("--logdir") + 1]).is_dir()
