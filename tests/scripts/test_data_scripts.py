"""base_model.sh and create_tfrecords.sh choosing the training text, run as a user runs
them but with partf-build-data and partf-train replaced by stubs that log their command
lines: what is checked is the wiring (which split trains, which tokenizer), in a second,
with no TensorFlow. The real build (half a minute for WikiText-2) is not run here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Writes the record folders the way partf-build-data does, as far as base_model.sh reads
# them: the folders, and metadata.json naming the text the _train records came from.
BUILD_STUB = """#!/usr/bin/env bash
echo "build $*" >> "$STUB_LOG"
split=train
for a in "$@"; do case "$a" in --train_split=*) split="${a#*=}" ;; esac; done
for s in train valid test; do
  d="data/wikitext2_bsz32_seqlen32_tfrecords_$s"
  mkdir -p "$d"
  src="$s.txt"
  [ "$s" = train ] && src="$split.txt"
  printf '{"source_file": "%s"}\\n' "$src" > "$d/metadata.json"
done
"""
TRAIN_STUB = """#!/usr/bin/env bash
echo "train $*" >> "$STUB_LOG"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the two scripts with a no-op setup_env.sh and the stubs on PATH."""
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    for name in ("base_model.sh", "create_tfrecords.sh"):
        shutil.copy2(ROOT / name, root / name)
    (root / "scripts" / "setup_env.sh").write_text("# the stubs are on PATH already\n")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, text in (("partf-build-data", BUILD_STUB), ("partf-train", TRAIN_STUB)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    (stubs / "python").symlink_to(sys.executable)  # base_model.sh reads metadata.json
    return root


def corpus(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(f" = {name} = \n")
    return folder


def run(project: Path, data_dir: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = project.parent / "stub.log"
    log.unlink(missing_ok=True)
    # A clean environment: a PARTF_TRAIN_SPLIT or VOCAB_SIZE of the caller's must not leak.
    env = {
        "PATH": f"{project.parent / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(project.parent),
        "STUB_LOG": str(log),
        "DATA_DIR": str(data_dir),
    }
    done = subprocess.run(
        ["bash", str(project / "base_model.sh")],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return done, calls


def flag(call: str, name: str) -> str:
    values = [arg.split("=", 1)[1] for arg in call.split() if arg.startswith(f"--{name}=")]
    assert len(values) == 1, (name, call)
    return values[0]


def test_folder_with_train_txt_trains_on_it_with_the_12k_tokenizer(project, tmp_path):
    data = corpus(tmp_path / "wikitext-2", "train.txt", "valid.txt", "test.txt")
    done, calls = run(project, data)
    assert done.returncode == 0, done.stderr
    build, train = calls
    assert build.startswith("build ") and train.startswith("train ")
    assert flag(build, "train_split") == "train"
    assert flag(build, "vocab_size") == "12000"
    assert flag(build, "text_file") == str(data) and " --from_directory" in build
    assert flag(build, "sp_model_prefix") == flag(train, "sp_model_prefix")
    assert flag(train, "sp_model_prefix") == "data/tokenizer/wiki2_12k"
    assert "no train.txt" not in done.stderr


def test_folder_without_train_txt_falls_back_to_valid_on_every_run(project, tmp_path):
    data = corpus(tmp_path / "mine", "valid.txt", "test.txt")
    done, (build, train) = run(project, data)
    assert done.returncode == 0, done.stderr
    assert "has no train.txt: training on valid.txt instead" in done.stderr
    assert (flag(build, "train_split"), flag(build, "vocab_size")) == ("valid", "6000")
    assert flag(train, "sp_model_prefix") == "data/tokenizer/wiki2_6k"
    # Run again (a resume): the records exist, nothing is built, the tokenizer is the same.
    done, calls = run(project, data)
    assert done.returncode == 0, done.stderr
    assert [c.split()[0] for c in calls] == ["train"]
    assert flag(calls[0], "sp_model_prefix") == "data/tokenizer/wiki2_6k"


def test_fallback_records_are_refused_once_train_txt_is_there(project, tmp_path):
    data = corpus(tmp_path / "mine", "valid.txt", "test.txt")
    assert run(project, data)[0].returncode == 0
    corpus(data, "train.txt")
    done, calls = run(project, data)
    assert done.returncode == 1 and calls == []  # neither built over nor trained on
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("base_model.sh: error: ")
    assert "was built from valid.txt" in lines[0]
    assert f"DATA_DIR={data} ./create_tfrecords.sh --overwrite" in lines[0]
