"""Fixtures of the command-line tests."""

from __future__ import annotations

import json

import pytest

from partf.serialization import FORMAT_VERSION
from tests.cli.helpers import tiny_model
from tests.data.helpers import wiki_lines, write_text


@pytest.fixture(scope="session")
def saved_run(tmp_path_factory) -> dict:
    """A trained tokenizer and a run laid out as partf-train writes it:
    <root>/data/tokenizer/tiny.model and <root>/runs/checkpoints/tiny/{tiny.keras,config.json},
    plus a folder holding only a checkpoint of the same model. Built once per session: the
    tests read it and copy what they change."""
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
