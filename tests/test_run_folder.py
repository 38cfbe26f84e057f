"""partf.run_folder: a run's files by name, its newest checkpoint, and its JSON files,
each refused in one line naming the file when it cannot be used; without Keras."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from partf.errors import DataError
from partf.run_folder import (
    CheckpointError,
    CheckpointFormatError,
    RunFolder,
    RunFolderError,
    read_checkpoint,
)
from partf.serialization import FORMAT_VERSION, FormatError


def _checkpoint(folder: RunFolder, step: int, format: int = FORMAT_VERSION):
    """Writes a checkpoint of one array as partf.training.checkpoint lays it out."""
    folder.path.mkdir(parents=True, exist_ok=True)
    meta = {"step": step, "layout": {"model": [["w", [2]]]}, "format": format}
    path = folder.checkpoint_path(step)
    np.savez(
        path,
        **{"model/0": np.full(2, step, "float32")},
        meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
    )
    return path


def test_the_layout():
    folder = RunFolder.of("out", "base")
    assert folder == RunFolder("out/checkpoints/base") and folder.name == "base"
    assert folder.config_path.name == "config.json"
    assert folder.results_path.name == "results.json"
    assert folder.cost_table_path.name == "cost_table.json"
    assert folder.selection_path.name == "selection.json"
    assert folder.model_file.name == "base.keras"
    assert folder.checkpoint_path(12).name == "ckpt-00000012.npz"


def test_checkpoints_by_name_and_the_newest_that_reads_back(tmp_path, caplog):
    folder = RunFolder(tmp_path / "run")
    assert folder.checkpoints() == [] and folder.newest_step() is None
    assert folder.newest_checkpoint() is None
    for step in (3, 12):
        _checkpoint(folder, step)
    (folder.path / "ckpt-7.npz.tmp").write_bytes(b"")  # not a checkpoint's name
    assert [step for step, _ in folder.checkpoints()] == [3, 12]
    assert folder.newest_step() == 12
    groups, meta, path = folder.newest_checkpoint()
    assert meta["step"] == 12 and path == folder.checkpoint_path(12)
    np.testing.assert_array_equal(groups["model"][0], [12, 12])
    newest = folder.checkpoint_path(12)
    newest.write_bytes(newest.read_bytes()[:100])  # truncated on disk
    assert folder.newest_checkpoint()[1]["step"] == 3  # falls back, with a warning
    assert f"checkpoint {newest} is unreadable" in caplog.text


def test_a_truncated_checkpoint_is_refused_in_one_line_naming_it(tmp_path):
    folder = RunFolder(tmp_path / "run")
    path = _checkpoint(folder, 5)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    assert str(caught.value).startswith(f"checkpoint {path} is unreadable (")
    with pytest.raises(CheckpointError) as caught:
        folder.newest_checkpoint("pass another run")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"no checkpoint in {folder.path} can be read; pass another run (")
    assert str(path) in message


def test_a_checkpoint_of_another_format_is_refused_not_skipped(tmp_path):
    folder = RunFolder(tmp_path / "run")
    _checkpoint(folder, 1)
    newest = _checkpoint(folder, 2, format=FORMAT_VERSION + 1)
    with pytest.raises(CheckpointFormatError) as caught:
        folder.newest_checkpoint()
    assert str(caught.value).startswith(f"checkpoint {newest} was written by a newer partf")


def test_a_missing_config_is_refused_in_one_line_naming_it(tmp_path):
    folder = RunFolder(tmp_path / "run")
    with pytest.raises(RunFolderError) as caught:
        folder.read_config()
    message = str(caught.value)
    assert isinstance(caught.value, DataError) and "\n" not in message
    assert message.startswith(f"{folder.config_path} is missing (partf-train writes it")
    with pytest.raises(RunFolderError, match="results.json is missing"):
        folder.read_results()
    assert not folder.finished


def test_unreadable_or_foreign_json_files_are_refused(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir(parents=True)
    folder.config_path.write_text('{"format": ')
    with pytest.raises(RunFolderError, match=rf"^cannot read {folder.config_path} \("):
        folder.read_config()
    folder.config_path.write_text("[1, 2]")
    with pytest.raises(RunFolderError, match="holds no JSON object"):
        folder.read_config()
    folder.results_path.write_text(json.dumps({"format": FORMAT_VERSION - 1}))
    with pytest.raises(FormatError, match="^--x: its results.json was written by an earlier"):
        folder.read_results("--x: its results.json")
    folder.results_path.write_text(json.dumps({"format": FORMAT_VERSION, "valid": 1}))
    assert folder.read_results()["valid"] == 1 and folder.finished


def test_the_model_file(tmp_path):
    folder = RunFolder(tmp_path / "base")
    folder.path.mkdir()
    assert folder.find_model_file() is None
    (folder.path / "renamed.keras").write_bytes(b"")
    assert folder.find_model_file() == folder.path / "renamed.keras"
    (folder.path / "other.keras").write_bytes(b"")
    with pytest.raises(RunFolderError, match=r"several \.keras files \(other.keras, renamed"):
        folder.find_model_file()
    folder.model_file.write_bytes(b"")
    assert folder.find_model_file() == folder.model_file


def test_reading_a_run_folder_imports_no_keras(tmp_path):
    folder = RunFolder(tmp_path / "run")
    _checkpoint(folder, 1)
    code = (
        "import sys; from partf.run_folder import RunFolder; "
        f"assert RunFolder({str(folder.path)!r}).newest_checkpoint() is not None; "
        "print(sorted(m for m in ('keras', 'tensorflow', 'jax') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
