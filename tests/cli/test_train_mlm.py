"""partf-build-data --mask_symbol, then partf-train --objective=mlm on its records: a tiny
run end to end through the command lines (in-process: a subprocess costs seconds of
TensorFlow import)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import keras
import pytest

import partf  # noqa: F401  (what a user imports to load the .keras file)
from partf.cli import build_data
from partf.cli.train import main
from tests.data.helpers import write_corpus


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A tokenizer with [MASK] (vocabulary 100) and records of 3 x 10 tokens."""
    root = tmp_path_factory.mktemp("mlm_cli")
    corpus = write_corpus(root / "corpus", train_lines=600, eval_lines=200)
    argv = [
        f"--text_file={corpus}",
        "--train_tokenizer",
        "--mask_symbol",
        "--vocab_size=100",
        f"--sp_model_prefix={root / 'tok' / 'tiny'}",
        f"--tfrecords_directory={root / 'rec'}",
        "--batch_size=3",
        "--seq_len=10",
    ]
    assert build_data.run(argv) == 0
    return root


def test_the_records_name_the_mask_id(built):
    from partf.data import read_metadata

    for split in ("train", "valid", "test"):
        assert read_metadata(built / f"rec_{split}").mask_id == 5


def test_a_tiny_mlm_run(built, capsys):
    root = built
    argv = [
        f"--train_directory={root / 'rec_train'}",
        f"--valid_directory={root / 'rec_valid'}",
        f"--test_directory={root / 'rec_test'}",
        f"--sp_model_prefix={root / 'tok' / 'tiny'}",
        "--objective=mlm",
        "--architecture=A D",
        "--attention=softmax",
        "--d_model=16",
        "--num_heads=2",
        "--d_ffn=32",
        "--num_layers=2",
        "--max_steps=6",
        "--nojit_compile",
        "--steps_per_execution=2",
        "--log_every=2",
        "--warmup_steps=2",
        f"--output_dir={root / 'runs'}",
        "--model_name=mlm",
    ]
    assert main(argv) == 0
    folder = root / "runs" / "checkpoints" / "mlm"
    results = json.loads((folder / "results.json").read_text())
    assert results["objective"] == "mlm" and results["steps"] == 6
    for split in ("valid", "test"):
        assert math.isfinite(results[split]["perplexity"]) and results[split]["num_tokens"] > 0
    # The encoder's settings are recorded: no memory, no adaptive softmax.
    assert (
        results["config"]["model"]["mem_len"] == 0 and results["config"]["model"]["cutoffs"] == []
    )
    model = keras.saving.load_model(folder / "mlm.keras")
    assert type(model).__name__ == "MaskedLanguageModel" and model.architecture_string() == "A D"


def _mlm_argv(root: Path, name: str, *extra: str) -> list[str]:
    return [
        f"--train_directory={root / 'rec_train'}",
        f"--valid_directory={root / 'rec_valid'}",
        f"--test_directory={root / 'rec_test'}",
        f"--sp_model_prefix={root / 'tok' / 'tiny'}",
        "--objective=mlm",
        "--attention=softmax",
        "--d_model=16",
        "--num_heads=2",
        "--d_ffn=32",
        "--num_layers=2",
        "--nojit_compile",
        "--steps_per_execution=2",
        "--log_every=2",
        "--warmup_steps=2",
        f"--output_dir={root / 'runs'}",
        f"--model_name={name}",
        *extra,
    ]


def test_an_mlm_search_then_its_architecture(built):
    """Without --architecture, --objective=mlm searches over non-causal candidates;
    --from_search then trains the architecture it found as a fixed encoder."""
    root = built
    # No identity candidate, so the found architecture cannot be empty.
    argv = _mlm_argv(root, "mlm_search", "--candidates=attention,dense", "--search=par")
    assert main([*argv, "--max_steps=4", "--tau_start=2.0"]) == 0
    folder = root / "runs" / "checkpoints" / "mlm_search"
    results = json.loads((folder / "results.json").read_text())
    assert results["objective"] == "mlm" and results["candidates"] == ["attention", "dense"]
    assert len(results["pi"]) == 2 and results["search"]["preset"] == "par"
    assert results["tau"] is not None and results["config"]["model"]["tau_start"] == 2.0
    model = keras.saving.load_model(folder / "mlm_search.keras")
    assert model.is_search and model.architecture_string() == results["architecture"]

    assert main(_mlm_argv(root, "found", f"--from_search={folder}", "--max_steps=2")) == 0
    fixed = json.loads((root / "runs" / "checkpoints" / "found" / "results.json").read_text())
    assert fixed["objective"] == "mlm" and fixed["search"] is None and fixed["tau"] is None
    assert fixed["architecture"] == results["architecture"]
    assert fixed["config"]["model"]["architecture"] == results["architecture"]


def test_a_causal_only_candidate_is_refused(built, tmp_path, capsys):
    argv = _mlm_argv(built, "refused", "--candidates=primal,dense")
    argv = [a if not a.startswith("--output_dir") else f"--output_dir={tmp_path}" for a in argv]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("partf-train: error: attention 'primal' (from candidates) is")
    assert "causal only and cannot be used in an Encoder" in lines[-1]
    assert not any(tmp_path.iterdir())
