"""partf-generate: prints text from a saved model, finds the run's tokenizer, one-line errors."""

from __future__ import annotations

import pytest

from partf.cli.generate import run
from tests.cli.helpers import PROMPT, error_line, tiny_model


def generate_text(capsys, *argv: str) -> str:
    assert run(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_prints_text_and_reproduces_it_from_the_run_folder(saved_run, capsys, monkeypatch):
    sampling = ["--max_tokens", "5", "--temperature", "0.9", "--top_k", "30", "--seed", "5"]
    model_file = saved_run["run_dir"] / "tiny.keras"
    text = generate_text(
        capsys,
        "--model",
        str(model_file),
        f"--sp_model={saved_run['sp_model']}",
        "--prompt",
        PROMPT,
        *sampling,
    )
    assert text.startswith(PROMPT), text
    assert len(text.strip()) > len(PROMPT)
    # The run folder: its .keras, and the tokenizer named in config.json, found
    # by walking up from the run (the path there is relative to the training folder).
    monkeypatch.chdir(saved_run["run_dir"])
    again = generate_text(capsys, "--model", ".", "--prompt", PROMPT, *sampling)
    assert again == text
    # A folder with only a checkpoint rebuilds the same model from config.json.
    monkeypatch.chdir(saved_run["root"])
    restored = generate_text(
        capsys, "--model", str(saved_run["ckpt_dir"]), "--prompt", PROMPT, *sampling
    )
    assert restored == text


def test_the_prompt_and_the_continuation_are_separated(saved_run, capsys):
    """The prompt, " | ", then the generated text decoded on its own; --separator ""
    joins them as one decoded text."""
    model = ["--model", str(saved_run["run_dir"] / "tiny.keras")]
    sampling = [f"--sp_model={saved_run['sp_model']}", "--prompt", PROMPT, "--max_tokens=8"]
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


def test_tokenizer_must_fit_the_model(saved_run, original_artifacts, capsys):
    sp_model = original_artifacts / "tokenizer" / "wiki2_12k.model"
    argv = ["--model", str(saved_run["run_dir"] / "tiny.keras"), "--sp_model", str(sp_model)]
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
def test_bad_values_exit_2(saved_run, capsys, flags, expected):
    assert run(["--model", str(saved_run["run_dir"] / "tiny.keras"), *flags]) == 2
    assert expected in error_line(capsys)


def test_verbose_adds_the_traceback(tmp_path, capsys):
    assert run(["--model", str(tmp_path / "nothing.keras"), "--verbose"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "partf-generate: error:" in err


def test_memoryless_model_needs_recompute(saved_run, capsys):
    argv = ["--model", str(saved_run["run_dir"] / "tiny.keras"), "--mem_len", "0"]
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
