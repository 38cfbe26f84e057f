"""How partf-generate and partf-evaluate find a model and its tokenizer
(`partf.cli.loading`): a missing or empty path, a tokenizer neither given nor named by the
run, a run config.json of another format and an unreadable .keras file are each one
line with the fix (seen through partf-generate)."""

from __future__ import annotations

import json
import shutil

import pytest

from partf.cli.generate import run
from partf.cli.loading import UsageExit, model_file
from partf.serialization import FORMAT_VERSION
from tests.cli.helpers import PROMPT, error_line


def test_missing_model_exits_2(tmp_path, capsys):
    assert run(["--model", str(tmp_path / "nothing.keras"), "--prompt", "x"]) == 2
    assert "does not exist" in error_line(capsys)
    assert run(["--prompt", "x"]) == 2
    assert "--model" in error_line(capsys)
    # An empty folder holds no model either.
    assert run(["--model", str(tmp_path)]) == 2
    assert "no .keras file and no checkpoint" in error_line(capsys)


def test_missing_tokenizer_exits_2(saved_run, tmp_path, capsys):
    keras_file = str(saved_run["run_dir"] / "tiny.keras")
    assert run(["--model", keras_file, f"--sp_model={tmp_path / 'missing.model'}"]) == 2
    assert "does not exist" in error_line(capsys)
    # No --sp_model and no config.json beside the model.
    alone = tmp_path / "alone.keras"
    alone.write_bytes((saved_run["run_dir"] / "tiny.keras").read_bytes())
    assert run(["--model", str(alone)]) == 2
    assert "pass --sp_model" in error_line(capsys)


@pytest.mark.parametrize("found", [None, FORMAT_VERSION - 1], ids=["none", "earlier"])
def test_a_config_json_of_another_format_is_refused_in_one_line(saved_run, tmp_path, capsys, found):
    """A run's config.json holds the format (one written before format 3 holds none) and
    partf-generate prefers it to the checkpoint's own record: one of another format is
    refused in one line naming both formats, exit status 1."""
    folder = tmp_path / "earlier"
    shutil.copytree(saved_run["ckpt_dir"], folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("format")
    if found is not None:
        config["format"] = found
    (folder / "config.json").write_text(json.dumps(config))
    argv = ["--model", str(folder), f"--sp_model={saved_run['sp_model']}", "--prompt", PROMPT]
    assert run(argv) == 1
    shown = "none" if found is None else found
    assert (
        f"{folder / 'config.json'} was written by an earlier partf (format {shown}; "
        f"this partf reads format {FORMAT_VERSION})"
    ) in error_line(capsys)


def test_a_config_json_lacking_a_setting_is_refused_in_one_line(saved_run, tmp_path, capsys):
    """A checkpoint's model is rebuilt from config.json: one of this format without a
    model setting is refused (exit status 1), not built with today's default."""
    folder = tmp_path / "lacking"
    shutil.copytree(saved_run["ckpt_dir"], folder)
    config = json.loads((folder / "config.json").read_text())
    del config["model"]["clamp_len"]
    (folder / "config.json").write_text(json.dumps(config))
    argv = ["--model", str(folder), f"--sp_model={saved_run['sp_model']}", "--prompt", PROMPT]
    assert run(argv) == 1
    said = f"{folder / 'config.json'} (model settings) lacks clamp_len, which every format"
    assert said in error_line(capsys)


def test_unreadable_model_exits_1(tmp_path, saved_run, capsys):
    broken = tmp_path / "broken.keras"
    broken.write_bytes(b"not a zip file")
    assert run(["--model", str(broken), f"--sp_model={saved_run['sp_model']}"]) == 1
    assert "cannot load" in error_line(capsys)


def test_a_folder_names_its_own_keras_file_or_its_only_one(tmp_path):
    """checkpoints/<name>: <name>.keras before any other, else the only .keras file, else
    None (its newest checkpoint is loaded); several others are refused, naming them."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "ckpt-00000007.npz").write_bytes(b"")
    assert model_file(folder) is None
    (folder / "b.keras").write_bytes(b"")
    assert model_file(folder) == folder / "b.keras"
    (folder / "a.keras").write_bytes(b"")
    with pytest.raises(UsageExit, match=r"holds several \.keras files \(a\.keras, b\.keras\); "):
        model_file(folder)
    (folder / "tiny.keras").write_bytes(b"")
    assert model_file(folder) == folder / "tiny.keras"


def test_a_truncated_checkpoint_is_refused_in_one_line_naming_it(saved_run, tmp_path, capsys):
    """A run folder whose only checkpoint is cut short: exit status 1, one line naming the
    checkpoint and what to pass instead (not "holds no checkpoint")."""
    folder = tmp_path / "cut"
    shutil.copytree(saved_run["ckpt_dir"], folder)
    (checkpoint,) = folder.glob("ckpt-*.npz")
    checkpoint.write_bytes(checkpoint.read_bytes()[:500])
    argv = ["--model", str(folder), f"--sp_model={saved_run['sp_model']}", "--prompt", PROMPT]
    assert run(argv) == 1
    line = error_line(capsys)
    assert f"no checkpoint in {folder} can be read; pass the run's .keras file" in line
    assert f"checkpoint {checkpoint} is unreadable" in line


def test_a_folder_without_config_json_needs_the_tokenizer_named(saved_run, tmp_path, capsys):
    """Without config.json the model comes from the checkpoint's own record, but nothing
    names its tokenizer: refused in one line naming config.json and --sp_model."""
    folder = tmp_path / "bare"
    shutil.copytree(saved_run["ckpt_dir"], folder)
    (folder / "config.json").unlink()
    assert run(["--model", str(folder), "--prompt", PROMPT]) == 2
    line = error_line(capsys)
    assert f"no config.json naming one beside the model in {folder}" in line
    assert "pass --sp_model" in line
