"""base_model.sh and create_tfrecords.sh choosing the training text, run as a user runs
them but with partf-build-data and partf-train replaced by stubs that log their command
lines: what is checked is the wiring (which split trains, which tokenizer), in a second,
with no TensorFlow. The real build (half a minute for WikiText-2) is not run here."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.scripts.helpers import run_logged

ROOT = Path(__file__).resolve().parents[2]

# Writes the record folders the way partf-build-data does, as far as base_model.sh reads
# them: the folders, and metadata.json naming the text the _train records came from. With
# STUB_BUILD_ERROR set it prints that line and fails, as partf-build-data does.
BUILD_STUB = """#!/usr/bin/env bash
echo "build $*" >> "$STUB_LOG"
if [ -n "${STUB_BUILD_ERROR:-}" ]; then echo "$STUB_BUILD_ERROR" >&2; exit 1; fi
split=train
for a in "$@"; do
  case "$a" in
    --train_split=*) split="${a#*=}" ;;
    --text_file=*) text="${a#*=}" ;;
    --sp_model_prefix=*) tokenizer="${a#*=}.model" ;;
  esac
done
mkdir -p "$(dirname "$tokenizer")" && touch "$tokenizer"
for s in train valid test; do
  d="data/wikitext2_bsz32_seqlen32_tfrecords_$s"
  mkdir -p "$d"
  src="$s.txt"
  [ "$s" = train ] && src="$split.txt"
  sha="$(sha256sum "$text/$src" | cut -c1-64)"
  printf '{"source_file": "%s", "source_sha256": "%s"}\\n' "$src" "$sha" > "$d/metadata.json"
done
"""
# With STUB_WAIT set it runs until a signal comes, logs which, and exits 128 + N as
# partf-train does after its checkpoint.
TRAIN_STUB = """#!/usr/bin/env bash
echo "train $*" >> "$STUB_LOG"
if [ -n "${STUB_WAIT:-}" ]; then
  trap 'echo "got INT" >> "$STUB_LOG"; exit 130' INT
  trap 'echo "got TERM" >> "$STUB_LOG"; exit 143' TERM
  touch "$STUB_WAIT"
  for _ in $(seq 600); do sleep 0.1; done
fi
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the two scripts with a no-op setup_env.sh and the stubs on PATH."""
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    for name in ("base_model.sh", "create_tfrecords.sh", "scripts/records_source.py"):
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


def clean_env(project: Path, data_dir: Path | None, **more: str) -> dict[str, str]:
    """A clean environment: a PARTF_TRAIN_SPLIT or VOCAB_SIZE of the caller's must not leak.
    DATA_DIR is left unset when `data_dir` is None."""
    return {
        "PATH": f"{project.parent / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(project.parent),
        "STUB_LOG": str(project.parent / "stub.log"),
        **({} if data_dir is None else {"DATA_DIR": str(data_dir)}),
        **more,
    }


def run(
    project: Path, data_dir: Path | None, script: str = "base_model.sh", *args: str, **env: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Runs `script` with DATA_DIR in a clean environment; returns it and the stubs' calls."""
    env = clean_env(project, data_dir, **env)
    return run_logged(
        ["bash", str(project / script), *args], project, env, project.parent / "stub.log"
    )


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
    assert done.returncode == 2 and calls == []  # neither built over nor trained on
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("base_model.sh: error: ")
    assert "was built from valid.txt" in lines[0]
    assert f"DATA_DIR={data} ./create_tfrecords.sh --overwrite" in lines[0]


def test_without_data_dir_the_shipped_wikitext2_is_built_and_its_error_is_the_only_line(
    project, tmp_path
):
    """No DATA_DIR: the records come from --source=wikitext-2 (the copy partf ships). When
    that build fails, its one error line (here a damaged copy) is all base_model.sh says."""
    error = (
        "partf-build-data: error: partf/data/wikitext2/wikitext-2.tar.xz is corrupt or "
        "truncated (sha256 of valid.txt does not match); restore it with git checkout -- "
        "partf/data/wikitext2/wikitext-2.tar.xz, or point DATA_DIR at a folder with "
        "train.txt, valid.txt and test.txt"
    )
    done, calls = run(project, None, STUB_BUILD_ERROR=error)
    assert done.returncode == 1 and [c.split()[0] for c in calls] == ["build"]
    assert " --source=wikitext-2 " in calls[0] + " "
    assert flag(calls[0], "text_file") == "data/wikitext-2"
    assert [line for line in done.stderr.splitlines() if "error" in line] == [error]


def one_error_line(done: subprocess.CompletedProcess, prog: str) -> str:
    """The only line on stderr, which must be `prog`'s error line."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), done.stderr
    return lines[0]


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("script", ["base_model.sh", "create_tfrecords.sh"])
@pytest.mark.parametrize("records_exist", [False, True], ids=["no_records", "records"])
def test_a_data_dir_that_does_not_exist_is_an_error(project, tmp_path, script, records_exist):
    """A typo in DATA_DIR is never ignored, not even when records built before exist."""
    if records_exist:
        assert run(project, corpus(tmp_path / "wikitext-2", *TEXTS))[0].returncode == 0
    before = tree(project)
    done, calls = run(project, tmp_path / "wikitext-3", script)
    assert done.returncode == 2 and calls == []
    line = one_error_line(done, script)
    assert f"DATA_DIR={tmp_path / 'wikitext-3'} does not exist" in line
    assert tree(project) == before  # nothing written


TEXTS = ("train.txt", "valid.txt", "test.txt")


@pytest.mark.parametrize("script", ["base_model.sh", "create_tfrecords.sh"])
def test_records_of_another_data_dir_are_refused(project, tmp_path, script):
    first = corpus(tmp_path / "wikitext-2", *TEXTS)
    assert run(project, first)[0].returncode == 0
    other = tmp_path / "other"
    other.mkdir()
    for name in TEXTS:
        (other / name).write_text(f" = another {name} = \n")
    before = tree(project)
    done, calls = run(project, other, script)
    assert done.returncode == 2 and calls == []  # neither built over nor trained on
    line = one_error_line(done, script)
    assert "was built from other text than" in line and f"DATA_DIR={other}" in line
    assert line.endswith(f"DATA_DIR={other} ./create_tfrecords.sh --overwrite")
    assert tree(project) == before
    # The fix works: --overwrite rebuilds from the new text, then training goes ahead.
    done, calls = run(project, other, "create_tfrecords.sh", "--overwrite")
    assert done.returncode == 0 and [c.split()[0] for c in calls] == ["build"]
    done, calls = run(project, other)
    assert done.returncode == 0 and [c.split()[0] for c in calls] == ["train"]


def test_the_same_text_in_another_folder_is_accepted(project, tmp_path):
    """Contents are compared, not paths: a copy of the text reuses the records."""
    first = corpus(tmp_path / "wikitext-2", *TEXTS)
    assert run(project, first)[0].returncode == 0
    copy = shutil.copytree(first, tmp_path / "copy")
    done, calls = run(project, copy)
    assert done.returncode == 0 and [c.split()[0] for c in calls] == ["train"], done.stderr
    done, calls = run(project, copy, "create_tfrecords.sh")
    assert done.returncode == 0 and calls == []
    assert "records already built" in done.stderr


def test_base_model_ends_with_the_next_commands_for_its_run(project, tmp_path):
    """The commands printed at the end name the real run folder and the venv's programs,
    so they run as printed in a fresh shell."""
    data = corpus(tmp_path / "wikitext-2", *TEXTS)
    done, _ = run(project, data)
    assert done.returncode == 0, done.stderr
    run_dir = "checkpoints/dmodel128_dffn512_blocks6"
    tail = done.stderr.splitlines()[-5:]
    assert tail[0] == f"=== partf: done: the run is in {run_dir} ==="
    assert "source .venv/bin/activate" in tail[1]
    assert tail[2].startswith(f"  .venv/bin/partf-generate --model {run_dir} --prompt ")
    records = "data/wikitext2_bsz32_seqlen32_tfrecords_test"
    assert tail[3] == f"  .venv/bin/partf-evaluate --model {run_dir} --records {records}"
    assert tail[4] == "  .venv/bin/tensorboard --logdir logs"
    # MODEL_NAME, OUTPUT_DIR and a --model_name given to the script (it wins) are followed.
    done, (call,) = run(project, data, "base_model.sh", "--model_name=mine", MODEL_NAME="x",
                        OUTPUT_DIR="out")  # fmt: skip
    assert flag(call, "output_dir") == "out"
    assert "=== partf: done: the run is in out/checkpoints/mine ===" in done.stderr
    assert "  .venv/bin/tensorboard --logdir out/logs" in done.stderr


def _default_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_base_model_reaches_partf_train_once(project, tmp_path, signum):
    """base_model.sh waits for partf-train rather than exec'ing it: a SIGTERM or SIGINT
    sent to the script is passed on (once), and the script exits with partf-train's
    status; nothing is printed after a stopped run."""
    data = corpus(tmp_path / "wikitext-2", *TEXTS)
    assert run(project, data)[0].returncode == 0  # records built
    log, ready = tmp_path / "stub.log", tmp_path / "ready"
    log.unlink()
    script = subprocess.Popen(
        ["bash", str(project / "base_model.sh")],
        cwd=project,
        env=clean_env(project, data, STUB_WAIT=str(ready)),
        stderr=subprocess.PIPE,
        text=True,
        # A shell cannot trap a signal ignored when it starts: begin with the defaults,
        # whatever an earlier test left in this process.
        preexec_fn=_default_signals,
    )
    # The stub says when its handlers are in place; on a loaded machine the script's
    # set-up before it can take well over 30 s.
    deadline = time.monotonic() + 180
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "partf-train's stub never started"
    script.send_signal(signum)
    _, err = script.communicate(timeout=120)
    assert script.returncode == 128 + signum, err
    name = signal.Signals(signum).name.removeprefix("SIG")
    assert log.read_text().splitlines()[1:] == [f"got {name}"]
    assert "done: the run is in" not in err


def readme_commands() -> list[list[str]]:
    """The README's command lines that call a program of .venv/bin, continuation lines
    joined and comments dropped, as argument lists."""
    commands, block, pending = [], False, ""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            block = not block
            continue
        if not block:
            continue
        pending += line.rstrip("\\")
        if line.endswith("\\"):
            continue
        argv = shlex.split(pending, comments=True)
        pending = ""
        if argv and argv[0].startswith(".venv/bin/"):
            commands.append(argv)
    return commands


def test_the_readmes_next_commands_are_the_ones_printed(project, tmp_path):
    """What base_model.sh prints at its end is in the README line for line."""
    done, _ = run(project, corpus(tmp_path / "wikitext-2", *TEXTS))
    printed = [shlex.split(line) for line in done.stderr.splitlines()[-3:]]
    assert [argv[0] for argv in printed] == [
        ".venv/bin/partf-generate",
        ".venv/bin/partf-evaluate",
        ".venv/bin/tensorboard",
    ]
    readme = readme_commands()
    for argv in printed:
        assert argv in readme, argv


def test_the_readmes_venv_commands_exist_and_their_flags_parse():
    """A dry run of each `.venv/bin/...` line of the README: the program is installed
    beside this Python (the venv), and partf's commands accept the flags as written."""
    from partf.cli import evaluate, generate

    parsers = {"partf-generate": generate.build_parser, "partf-evaluate": evaluate.build_parser}
    bin_dir = Path(sys.executable).parent
    commands = readme_commands()
    assert len(commands) >= 4
    for program, *argv in commands:
        name = Path(program).name
        if not (bin_dir / name).is_file():
            pytest.skip(f"{name} is not installed next to {sys.executable}")
        if name in parsers:
            parsers[name]().parse_args(argv)  # a mistyped flag raises UsageExit
    # The paths they name are the ones the scripts write.
    base, build = (ROOT / "base_model.sh").read_text(), (ROOT / "create_tfrecords.sh").read_text()
    assert "MODEL_NAME:-dmodel128_dffn512_blocks6" in base
    assert "RECORDS=data/wikitext2_bsz32_seqlen32_tfrecords" in build
