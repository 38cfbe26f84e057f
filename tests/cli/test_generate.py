"""partf-generate: prints text from a saved model, finds the run's tokenizer, one-line errors."""

from __future__ import annotations

import json
import shutil

import keras
import numpy as np
import pytest

from partf.cli.generate import run
from partf.serialization import FORMAT_VERSION
from tests.data.helpers import wiki_lines, write_text

PROMPT = "the game was released"
TINY = dict(
    d_model=16,
    num_heads=2,
    d_ffn=32,
    num_layers=2,
    mem_len=8,
    cutoffs=(20,),
    batch_size=4,
    eval_mode="expected",
)


def error_line(capsys) -> str:
    """The one error line; fails if there is not exactly one, or a traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("partf-generate: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def tiny_model(vocab_size: int, seed: int):
    from partf.models import PARTransformerXL

    keras.utils.set_random_seed(seed)
    model = PARTransformerXL(TINY, vocab_size=vocab_size, name="tiny")
    rng = np.random.default_rng(seed)
    for var in model.arch_variables:
        var.assign(rng.normal(size=var.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict:
    """A trained tokenizer and a run laid out as partf-train writes it:
    <root>/data/tokenizer/tiny.model and <root>/runs/checkpoints/tiny/{tiny.keras,config.json},
    plus a folder holding only a checkpoint of the same model."""
    from partf.data import train_tokenizer
    from partf.training.checkpoint import CheckpointManager

    root = tmp_path_factory.mktemp("generate")
    text = write_text(root / "corpus" / "train.txt", wiki_lines(600, seed=0))
    sp_model = train_tokenizer(text, root / "data" / "tokenizer" / "tiny", vocab_size=100)
    model = tiny_model(100, seed=3)
    run_dir = root / "runs" / "checkpoints" / "tiny"
    run_dir.mkdir(parents=True)
    model.save(run_dir / "tiny.keras")
    config = {
        "format": FORMAT_VERSION,
        "model": model.config.to_dict(),
        "training": {"sp_model_prefix": "data/tokenizer/tiny", "output_dir": "runs"},
    }
    (run_dir / "config.json").write_text(json.dumps(config))
    # A run interrupted before its .keras was written: only config.json and ckpt-*.npz
    # (the model named "tiny" in it, as partf-train records; partf-generate names it
    # "unfinished", after the folder).
    ckpt_dir = root / "runs" / "checkpoints" / "unfinished"
    meta = {"config": config, "model_name": model.name}
    CheckpointManager(ckpt_dir).save(7, {"model": model.variables}, meta=meta)
    (ckpt_dir / "config.json").write_text(json.dumps(config))
    return {"root": root, "sp_model": sp_model, "run_dir": run_dir, "ckpt_dir": ckpt_dir}


def generate_text(capsys, *argv: str) -> str:
    assert run(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_prints_text_and_reproduces_it_from_the_run_folder(workspace, capsys, monkeypatch):
    sampling = ["--max_tokens", "5", "--temperature", "0.9", "--top_k", "30", "--seed", "5"]
    model_file = workspace["run_dir"] / "tiny.keras"
    text = generate_text(
        capsys,
        "--model",
        str(model_file),
        f"--sp_model={workspace['sp_model']}",
        "--prompt",
        PROMPT,
        *sampling,
    )
    assert text.startswith(PROMPT), text
    assert len(text.strip()) > len(PROMPT)
    # The run folder: its .keras, and the tokenizer named in config.json, found
    # by walking up from the run (the path there is relative to the training folder).
    monkeypatch.chdir(workspace["run_dir"])
    again = generate_text(capsys, "--model", ".", "--prompt", PROMPT, *sampling)
    assert again == text
    # A folder with only a checkpoint rebuilds the same model from config.json.
    monkeypatch.chdir(workspace["root"])
    restored = generate_text(
        capsys, "--model", str(workspace["ckpt_dir"]), "--prompt", PROMPT, *sampling
    )
    assert restored == text


def test_the_prompt_and_the_continuation_are_separated(workspace, capsys):
    """The prompt, " | ", then the generated text decoded on its own; --separator ""
    joins them as one decoded text."""
    model = ["--model", str(workspace["run_dir"] / "tiny.keras")]
    sampling = [f"--sp_model={workspace['sp_model']}", "--prompt", PROMPT, "--max_tokens=8"]
    sampling += ["--temperature=0.9", "--seed=3"]
    text = generate_text(capsys, *model, *sampling)
    prompt, sep, continuation = text.rstrip("\n").partition(" | ")
    assert (prompt, sep) == (PROMPT, " | ") and continuation.strip(), text
    joined = generate_text(capsys, *model, *sampling, "--separator=")
    assert " | " not in joined and joined.startswith(PROMPT)
    assert joined.replace(" ", "") == (prompt + continuation).replace(" ", "") + "\n"


def test_original_tokenizer(original_artifacts, tmp_path, capsys):
    sp_model = original_artifacts / "tokenizer" / "wiki2_12k.model"
    model = tiny_model(12000, seed=4)
    model_file = tmp_path / "orig.keras"
    model.save(model_file)
    text = generate_text(
        capsys,
        f"--model={model_file}",
        f"--sp_model={sp_model}",
        "--prompt=The Valkyria series",
        "--max_tokens=6",
        "--temperature=0",
    )
    assert text.startswith("the valkyria series"), text  # the tokenizer lowercases


def test_tokenizer_must_fit_the_model(workspace, original_artifacts, capsys):
    sp_model = original_artifacts / "tokenizer" / "wiki2_12k.model"
    argv = ["--model", str(workspace["run_dir"] / "tiny.keras"), "--sp_model", str(sp_model)]
    assert run(argv) == 2
    assert "12000 pieces but the model 100" in error_line(capsys)


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--max_tokens", "-1"], "--max_tokens must be >= 0"),
        (["--top_p", "0"], "--top_p must be in (0, 1]"),
        (["--top_p", "1.5"], "--top_p must be in (0, 1]"),
        (["--temperature", "-0.5"], "--temperature must be >= 0"),
        (["--top_k", "-3"], "--top_k must be >= 0"),
        (["--max_tokens", "ten"], "invalid int value"),
        (["--top_kk", "3"], "unrecognized arguments"),
    ],
)
def test_bad_values_exit_2(workspace, capsys, flags, expected):
    assert run(["--model", str(workspace["run_dir"] / "tiny.keras"), *flags]) == 2
    assert expected in error_line(capsys)


def test_missing_tokenizer_exits_2(workspace, tmp_path, capsys):
    model_file = str(workspace["run_dir"] / "tiny.keras")
    assert run(["--model", model_file, f"--sp_model={tmp_path / 'missing.model'}"]) == 2
    assert "does not exist" in error_line(capsys)
    # No --sp_model and no config.json beside the model.
    alone = tmp_path / "alone.keras"
    alone.write_bytes((workspace["run_dir"] / "tiny.keras").read_bytes())
    assert run(["--model", str(alone)]) == 2
    assert "pass --sp_model" in error_line(capsys)


def test_missing_model_exits_2(tmp_path, capsys):
    assert run(["--model", str(tmp_path / "nothing.keras"), "--prompt", "x"]) == 2
    assert "does not exist" in error_line(capsys)
    assert run(["--prompt", "x"]) == 2
    assert "--model" in error_line(capsys)
    # An empty folder holds no model either.
    assert run(["--model", str(tmp_path)]) == 2
    assert "no .keras file and no checkpoint" in error_line(capsys)


@pytest.mark.parametrize("found", [None, FORMAT_VERSION - 1], ids=["none", "earlier"])
def test_a_config_json_of_another_format_is_refused_in_one_line(workspace, tmp_path, capsys, found):
    """A run's config.json holds the format (one written before format 3 holds none) and
    partf-generate prefers it to the checkpoint's own record: one of another format is
    refused in one line naming both formats, exit status 1."""
    folder = tmp_path / "earlier"
    shutil.copytree(workspace["ckpt_dir"], folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("format")
    if found is not None:
        config["format"] = found
    (folder / "config.json").write_text(json.dumps(config))
    argv = ["--model", str(folder), f"--sp_model={workspace['sp_model']}", "--prompt", PROMPT]
    assert run(argv) == 1
    shown = "none" if found is None else found
    assert (
        f"{folder / 'config.json'} was written by an earlier partf (format {shown}; "
        f"this partf reads format {FORMAT_VERSION})"
    ) in error_line(capsys)


def test_a_config_json_lacking_a_setting_is_refused_in_one_line(workspace, tmp_path, capsys):
    """A checkpoint's model is rebuilt from config.json: one of this format without a
    model setting is refused (exit status 1), not built with today's default."""
    folder = tmp_path / "lacking"
    shutil.copytree(workspace["ckpt_dir"], folder)
    config = json.loads((folder / "config.json").read_text())
    del config["model"]["clamp_len"]
    (folder / "config.json").write_text(json.dumps(config))
    argv = ["--model", str(folder), f"--sp_model={workspace['sp_model']}", "--prompt", PROMPT]
    assert run(argv) == 1
    said = f"{folder / 'config.json'} (model settings) lacks clamp_len, which every format"
    assert said in error_line(capsys)


def test_verbose_adds_the_traceback(tmp_path, capsys):
    assert run(["--model", str(tmp_path / "nothing.keras"), "--verbose"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "partf-generate: error:" in err


def test_unreadable_model_exits_1(tmp_path, workspace, capsys):
    broken = tmp_path / "broken.keras"
    broken.write_bytes(b"not a zip file")
    assert run(["--model", str(broken), f"--sp_model={workspace['sp_model']}"]) == 1
    assert "cannot load" in error_line(capsys)


def test_memoryless_model_needs_recompute(workspace, capsys):
    argv = ["--model", str(workspace["run_dir"] / "tiny.keras"), "--mem_len", "0"]
    assert run([*argv, "--max_tokens", "2"]) == 2
    assert "--mode recompute" in error_line(capsys)
    text = generate_text(
        capsys,
        *argv,
        "--mode",
        "recompute",
        "--context_len",
        "8",
        "--max_tokens",
        "3",
        "--temperature",
        "0",
        "--prompt",
        PROMPT,
    )
    assert text.startswith(PROMPT)
