"""partf.training.search: from a finished search's results.json to a fixed-model config."""

from __future__ import annotations

import json

import pytest

from partf.training.config import ConfigError, TrainConfig
from partf.training.search import config_from_search, read_search


def _write_search(folder, model, training_changes=None, pi=None):
    """A results.json as a finished search run writes it (only what is read back)."""
    training = TrainConfig(model_name="search", epochs=3, warmup_steps=7, overwrite=True)
    training = {**training.to_dict(), **(training_changes or {})}
    training.pop("model")
    folder.mkdir(parents=True, exist_ok=True)
    results = {
        "model_name": "search",
        "pi": pi or [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1]],
        "candidates": ["attention", "dense", "identity"],
        "config": {"model": model, "training": training},
    }
    (folder / "results.json").write_text(json.dumps(results))
    return folder


_SEARCHED_MODEL = {
    "vocab_size": 60,
    "batch_size": 4,
    "tau_steps": 12,
    "d_model": 8,
    "num_heads": 2,
    "num_layers": 3,
    "cutoffs": [20],
    "architecture": None,
}


def test_the_search_settings_apply_unless_given(tmp_path):
    folder = _write_search(tmp_path / "checkpoints/search", _SEARCHED_MODEL)
    given = TrainConfig(model_name="now", max_lr=1e-3, model={"d_model": 16})
    config = config_from_search(folder, given, explicit={"max_lr", "d_model"})
    assert config.model == {
        "d_model": 16,  # given here
        "num_heads": 2,
        "num_layers": 2,  # attention, identity (dropped), dense
        "cutoffs": (20,),
        "architecture": "A D",
    }
    assert (config.epochs, config.warmup_steps) == (3, 7)  # as searched
    assert config.max_lr == 1e-3  # given here
    assert config.model_name == "search-fixed" and config.overwrite is False


def test_explicit_name_and_overwrite_win(tmp_path):
    folder = _write_search(tmp_path / "s", _SEARCHED_MODEL)
    given = TrainConfig(model_name="mine", overwrite=True)
    config = config_from_search(folder, given, explicit={"model_name", "overwrite"})
    assert config.model_name == "mine" and config.overwrite is True


def test_no_finished_search(tmp_path):
    with pytest.raises(ConfigError, match="no finished search there"):
        read_search(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"pi": [[1.0]]}))
    with pytest.raises(ConfigError, match="no finished search there"):
        read_search(tmp_path)


def test_a_fixed_architecture_run_is_no_search(tmp_path):
    folder = _write_search(tmp_path / "s", {**_SEARCHED_MODEL, "architecture": "A D D"})
    with pytest.raises(ConfigError, match="use --architecture instead"):
        config_from_search(folder, TrainConfig(), explicit=set())


def test_read_search(tmp_path):
    found = read_search(_write_search(tmp_path / "s", _SEARCHED_MODEL))
    assert found.name == "search" and found.candidates == ["attention", "dense", "identity"]
    assert found.model["d_model"] == 8 and found.training["epochs"] == 3
