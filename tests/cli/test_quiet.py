"""Quiet by default (issue 24): `--help` and flag mistakes answer without loading
TensorFlow, and a command that loads it prints none of its C++ start-up lines, so a
failure is one line on stderr.

The commands run as subprocesses with TF_CPP_MIN_LOG_LEVEL unset, as a user runs them:
in-process, TensorFlow is already loaded (tests/conftest.py) and its lines would go
past capsys anyway.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from partf.cli import exits, settings_source

#: Console script -> (module, entry point).
COMMANDS = {
    "partf-build-data": ("partf.cli.build_data", "run"),
    "partf-train": ("partf.cli.train", "main"),
    "partf-generate": ("partf.cli.generate", "run"),
    "partf-evaluate": ("partf.cli.evaluate", "run"),
}

#: Runs an entry point on --help and on a mistyped flag in a fresh interpreter, then
#: fails if either imported TensorFlow or Keras.
NOTHING_LOADED = """
import sys
from {module} import {entry} as entry

for argv, expected in ((["--help"], 0), (["--bogus_flag"], 2)):
    try:
        status = entry(argv)
    except SystemExit as done:
        status = done.code
    assert (status or 0) == expected, (argv, status)
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("tensorflow", "keras"))
assert not loaded, loaded[:5]
"""


def user_env() -> dict[str, str]:
    """The environment of a user who set no TensorFlow log level."""
    return {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=300
    )


def installed(command: str) -> str:
    path = Path(sys.executable).parent / command
    if not path.is_file():
        pytest.skip(f"{command} is not installed next to {sys.executable}")
    return str(path)


def one_error_line(done: subprocess.CompletedProcess, prog: str) -> str:
    """The only line on stderr, which must be `prog`'s error line."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_and_flag_mistakes_load_no_tensorflow(command, tmp_path):
    module, entry = COMMANDS[command]
    code = NOTHING_LOADED.format(module=module, entry=entry)
    done = run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_installed_commands_answer_help_and_a_bad_flag_quietly(command, tmp_path):
    path = installed(command)
    shown = run([path, "--help"], tmp_path)
    assert shown.returncode == 0 and shown.stderr == ""
    assert "--verbose" in shown.stdout
    bad = run([path, "--bogus_flag"], tmp_path)
    assert bad.returncode == 2
    one_error_line(bad, command)


#: Mistakes found from the command line and the file system alone: each is answered
#: without loading TensorFlow. (command, arguments, message); {tmp} is an empty folder.
EARLY_MISTAKES = {
    "missing_model": (
        "partf-generate",
        ["--model", "{tmp}/nonexistent"],
        "--model {tmp}/nonexistent does not exist; pass a .keras file",
    ),
    "empty_model_folder": (
        "partf-evaluate",
        ["--model", "{tmp}", "--records", "{tmp}"],
        "{tmp} holds no .keras file and no checkpoint",
    ),
    "empty_records_folder": (
        "partf-evaluate",
        ["--model", "{tmp}/run/run.keras", "--records", "{tmp}"],
        "{tmp} holds no metadata.json and no .tfrecords files; build records with",
    ),
    "unknown_attention": (
        "partf-train",
        ["--attention=nosuch"],
        "unknown attention 'nosuch'; valid names: diag, eva, fastformer, lara,",
    ),
    "unknown_candidate": (
        "partf-train",
        ["--candidates=relative,nosuch"],
        "unknown candidate 'nosuch'; use one of attention, dense, identity or an attention",
    ),
}


def _early_case(case: str, tmp_path: Path) -> tuple[str, list[str], str]:
    command, argv, message = EARLY_MISTAKES[case]
    if case == "empty_records_folder":  # a model file to get past the model check
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "run.keras").write_bytes(b"not read")
    fill = [arg.format(tmp=tmp_path) for arg in argv]
    return command, fill, message.format(tmp=tmp_path)


@pytest.mark.parametrize("case", sorted(EARLY_MISTAKES))
def test_early_mistakes_are_answered_without_tensorflow(case, tmp_path):
    command, argv, message = _early_case(case, tmp_path)
    module, entry = COMMANDS[command]
    code = (
        f"import sys\nfrom {module} import {entry} as entry\n"
        f"status = entry({argv!r})\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]\n"
        "assert not loaded, loaded[:5]\nsys.exit(status)\n"
    )
    done = run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in one_error_line(done, command)


@pytest.mark.parametrize("case", sorted(EARLY_MISTAKES))
def test_installed_commands_answer_early_mistakes_leaving_nothing(case, tmp_path):
    command, argv, message = _early_case(case, tmp_path)
    work = tmp_path / "work"  # the current folder, where partf-train would write
    work.mkdir()
    before = sorted(tmp_path.rglob("*"))
    done = run([installed(command), *argv], work)
    assert done.returncode == 2
    assert message in one_error_line(done, command)
    assert sorted(tmp_path.rglob("*")) == before


def test_a_data_error_after_tensorflow_loaded_is_one_line(tmp_path):
    """partf-train on records it cannot read: TensorFlow loads, runs the reader, and the
    error line is all that stderr gets."""
    records = tmp_path / "train"
    records.mkdir()
    (records / "train.tfrecords").write_bytes(b"not a record\n")
    argv = [
        f"--train_directory={records}",
        "--valid_directory=",
        "--test_directory=",
        f"--output_dir={tmp_path / 'out'}",
        "--model_name=bad",
        "--max_steps=1",
    ]
    code = (
        "import sys\nfrom partf.cli.train import main\n"
        f"status = main({argv!r})\n"
        "assert 'tensorflow' in sys.modules\nsys.exit(status)\n"
    )
    done = run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "does not hold context-batch records" in one_error_line(done, "partf-train")


def test_the_test_command_prints_no_tensorflow_startup_lines():
    """pytest on the tests folder: tests/attention/conftest.py imports TensorFlow during
    collection, outside pytest's capture; tests/conftest.py filters what it prints then.
    The test modules are left out (--ignore-glob) so that only the conftests load."""
    root = Path(__file__).resolve().parents[2]
    argv = ["--collect-only", "-q", "-p", "no:cacheprovider", "tests", "--ignore-glob=*/test_*.py"]
    code = (
        "import sys, pytest\n"
        f"status = pytest.main({argv!r})\n"
        "assert 'tensorflow' in sys.modules, 'TensorFlow was not loaded: nothing checked'\n"
        "sys.exit(0 if status == 5 else status)  # 5: no tests collected, as meant\n"
    )
    done = run([sys.executable, "-c", code], root)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (done.stdout + done.stderr).splitlines():
        assert not STARTUP_LINE.match(line), line


#: A line TensorFlow's C++ code writes while it loads (see STARTUP below).
STARTUP_LINE = re.compile(r"([IW]\d{4} [\d:.]+ +\d+ \S+:\d+\] )|WARNING: All log messages before")


# ------------------------------------------------------------------- the filter itself
#: What TensorFlow 2.21 writes on fd 2 while it loads on a machine without a GPU (and a
#: GPU build's duplicate registration), then lines that must get through: a Python
#: warning, an error, a fatal error.
STARTUP = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1795732924.341002    4633 port.cc:153] oneDNN custom operations are on.\n"
    b"I0000 00:00:1795732924.341445    4633 cudart_stub.cc:31] Could not find cuda drivers on "
    b"your machine, GPU will not be used.\n"
    b"W0000 00:00:1795732924.5    4633 gpu_device.cc:2344] Cannot dlopen some GPU libraries.\n"
    b"E0000 00:00:1795733156.406979    9503 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    b"CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
    b"E0000 00:00:1731.5    9503 cuda_dnn.cc:8579] Unable to register cuDNN factory: Attempting "
    b"to register factory for plugin cuDNN when one has already been registered\n"
)
KEPT = (
    b"/x.py:1: UserWarning: a warning from Python\n"
    b"E0000 00:00:1795733156.5    9503 loader.cc:1] a real error\n"
    b"F0000 00:00:1795733156.6    9503 guard.cc:2] a fatal error\n"
)

FILTERED = """
import os, sys
from partf.cli.exits import filtered_stderr

with filtered_stderr(int(sys.argv[1])):
    os.write(2, sys.stdin.buffer.read())
    {inside}
os.write(2, b"after\\n")
"""


def filtered(level: int, text: bytes, inside: str = "pass") -> subprocess.CompletedProcess:
    code = FILTERED.format(inside=inside)
    return subprocess.run(
        [sys.executable, "-c", code, str(level)], input=text, capture_output=True, timeout=60
    )


def test_the_filter_drops_the_startup_lines_and_passes_the_rest():
    done = filtered(exits.QUIET_LEVEL, STARTUP + KEPT)
    assert done.returncode == 0
    assert done.stderr == KEPT + b"after\n"  # fd 2 is back after the block


def test_the_filter_keeps_what_the_level_asks_for():
    assert filtered(0, STARTUP + KEPT).stderr == STARTUP + KEPT + b"after\n"
    # Warnings shown; the cuInit failure restates the driver notice, so it counts as one.
    assert filtered(1, STARTUP).stderr.splitlines() == [STARTUP.splitlines()[3], b"after"]
    assert filtered(3, KEPT).stderr.splitlines() == [*KEPT.splitlines()[::2], b"after"]


def test_a_traceback_inside_the_filter_is_shown():
    done = filtered(exits.QUIET_LEVEL, STARTUP, inside="raise ValueError('boom')")
    assert done.returncode == 1
    assert b"Traceback" in done.stderr and b"ValueError: boom" in done.stderr
    assert b"I0000" not in done.stderr and b"after" not in done.stderr


def test_the_level_follows_verbose_then_the_users_setting(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    assert exits.tensorflow_log_level(verbose=False) == exits.QUIET_LEVEL
    assert exits.tensorflow_log_level(verbose=True) == 0
    for value, level in (("0", 0), ("1", 1), ("3", 3), ("loud", exits.QUIET_LEVEL)):
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", value)
        assert exits.tensorflow_log_level(verbose=False) == level


# ------------------------------------------------- the settings read from the source
def test_the_settings_read_from_the_source_are_those_the_classes_give():
    """What partf/cli/settings_source.py reads with `ast` is what importing the
    configurations and the attention classes (option_help, constructor defaults) gives."""
    from partf.attention import get_attention_class
    from partf.attention.registry import builtin_attention_names
    from partf.cli.flags import settings_of
    from partf.models.config import ModelConfig
    from partf.training.config import TrainConfig

    assert settings_source.train_settings() == settings_of(TrainConfig)
    assert settings_source.model_settings() == settings_of(ModelConfig)
    imported = {name: get_attention_class(name).options for name in builtin_attention_names()}
    read = settings_source.mechanism_options()
    assert read == imported
    # The same order too (--help lists each option's mechanisms in it).
    assert [list(options) for options in read.values()] == [list(imported[name]) for name in read]


def test_the_early_name_checks_know_what_the_model_accepts():
    """partf-train checks --attention and --candidates against the mechanisms read from
    the source and its copy of the candidate kinds; those are what ModelConfig accepts."""
    from partf.attention.registry import builtin_attention_names
    from partf.cli import train
    from partf.layers.candidates import BUILTIN_CANDIDATES

    assert sorted(settings_source.mechanism_options()) == builtin_attention_names()
    assert train.CANDIDATE_KINDS == BUILTIN_CANDIDATES


# ------------------------------------------------------------------ slow: every command
@pytest.mark.slow
def test_every_installed_command_fails_on_bad_data_in_one_line(tmp_path):
    """Each command loads TensorFlow before it finds the problem (seconds each)."""
    from partf.cli import build_data
    from tests.data.helpers import write_corpus

    corpus = write_corpus(tmp_path / "corpus", train_lines=600, eval_lines=200)
    tokenizer, records = tmp_path / "tok" / "tiny", tmp_path / "rec"  # no [MASK] symbol
    built = [f"--text_file={corpus}", "--train_tokenizer", f"--sp_model_prefix={tokenizer}"]
    built += [f"--tfrecords_directory={records}", "--vocab_size=100", "--batch_size=3"]
    assert build_data.run([*built, "--seq_len=10"]) == 0
    mlm = ["--objective=mlm", "--architecture=A D", "--num_layers=2", "--attention=softmax"]
    mlm += [f"--train_directory={records}_train", "--valid_directory=", "--test_directory="]
    mlm += [f"--sp_model_prefix={tokenizer}", f"--output_dir={tmp_path / 'out'}", "--model_name=m"]
    cases = [
        (["partf-train", *mlm], 2, "needs a [MASK] token"),
        (["partf-train", f"--train_directory={tmp_path / 'none'}"], 2, "do not exist"),
        (["partf-evaluate", "--model=missing.keras", f"--records={records}_valid"], 2, "missing"),
        (["partf-generate", "--model=missing.keras"], 2, "missing"),
        (["partf-build-data", f"--text_file={tmp_path / 'none.txt'}"], 2, "does not exist"),
    ]
    for (command, *rest), status, message in cases:
        done = run([installed(command), *rest], tmp_path)
        assert done.returncode == status, (command, done.stderr)
        assert message in one_error_line(done, command)
