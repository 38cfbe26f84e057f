"""partf.training.search: from a finished search's results.json to a fixed-model config."""

from __future__ import annotations

import json

import pytest

from partf.models.config import ModelConfig
from partf.serialization import FORMAT_VERSION, FormatError
from partf.training.config import ConfigError, TrainConfig
from partf.training.search import config_from_search, read_search


def _write_search(folder, model, training_changes=None, pi=None):
    """A results.json as a finished search run writes it (the model `model`'s fields, the
    others at their defaults: the file holds every setting)."""
    training = TrainConfig(model_name="search", epochs=3, warmup_steps=7, overwrite=True)
    training = {**training.to_dict(), **(training_changes or {})}
    training.pop("model")
    folder.mkdir(parents=True, exist_ok=True)
    results = {
        "format": FORMAT_VERSION,
        "model_name": "search",
        "pi": pi or [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1]],
        "candidates": ["attention", "dense", "identity"],
        "config": {"model": ModelConfig.from_dict(model).to_dict(), "training": training},
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
    given = TrainConfig(model_name="now", max_lr=1e-3)
    config = config_from_search(folder, given, explicit={"max_lr"}, model={"d_model": 16})
    fields = {
        "d_model": 16,  # given here
        "num_heads": 2,
        "num_layers": 2,  # attention, identity (dropped), dense
        "cutoffs": (20,),
        "architecture": "A D",
    }
    # The rest as the search's results.json holds them (its options written out).
    searched = ModelConfig.from_dict(_SEARCHED_MODEL)
    assert config.model == searched.replace(
        **fields, vocab_size=None, batch_size=None, tau_steps=None
    )
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
    (tmp_path / "results.json").write_text(json.dumps({"format": FORMAT_VERSION, "pi": [[1.0]]}))
    with pytest.raises(ConfigError, match="no finished search there"):
        read_search(tmp_path)


def test_a_search_of_another_format_is_refused_in_one_line(tmp_path):
    folder = _write_search(tmp_path / "s", _SEARCHED_MODEL)
    results = json.loads((folder / "results.json").read_text())
    earlier = FORMAT_VERSION - 1
    for found, said in (
        (None, "an earlier partf (format none;"),
        (earlier, f"an earlier partf (format {earlier}; this partf reads format {FORMAT_VERSION})"),
        (FORMAT_VERSION + 1, f"a newer partf (format {FORMAT_VERSION + 1};"),
    ):
        results["format"] = found
        (folder / "results.json").write_text(json.dumps(results))
        with pytest.raises(FormatError) as caught:
            read_search(folder)
        assert "\n" not in str(caught.value)
        assert str(caught.value).startswith(f"--from_search {folder}: its results.json")
        assert said in str(caught.value)


@pytest.mark.parametrize(("part", "dropped"), [("model", "position"), ("training", "epochs")])
def test_a_search_lacking_a_setting_is_refused_not_defaulted(tmp_path, part, dropped):
    folder = _write_search(tmp_path / "s", _SEARCHED_MODEL)
    results = json.loads((folder / "results.json").read_text())
    del results["config"][part][dropped]
    (folder / "results.json").write_text(json.dumps(results))
    with pytest.raises(FormatError) as caught:
        read_search(folder)
    assert str(caught.value).startswith(
        f"--from_search {folder}: its results.json ({part} settings) lacks {dropped}, which"
    )


def test_a_fixed_architecture_run_is_no_search(tmp_path):
    folder = _write_search(tmp_path / "s", {**_SEARCHED_MODEL, "architecture": "A D D"})
    with pytest.raises(ConfigError, match="use --architecture instead"):
        config_from_search(folder, TrainConfig(), explicit=set())


def test_read_search(tmp_path):
    found = read_search(_write_search(tmp_path / "s", _SEARCHED_MODEL))
    assert found.name == "search" and found.candidates == ["attention", "dense", "identity"]
    assert found.model["d_model"] == 8 and found.training["epochs"] == 3


def test_a_searched_block_architecture_derives_its_kept_blocks(tmp_path):
    """A search over 'A|I D|I A|I': pi has zeros where a block has no such candidate, a
    block's tie among its own candidates is undecided, the rest derive as usual."""
    from partf.training.search import searched_architecture

    names = ["attention", "identity", "dense"]
    pi = [[0.9, 0.1, 0.0], [0.0, 0.7, 0.3], [0.2, 0.8, 0.0]]
    assert searched_architecture(pi, names) == "A"
    with pytest.raises(ConfigError, match="has not decided block"):
        searched_architecture([[0.5, 0.5, 0.0], [0.0, 0.3, 0.7]], names)
    model = {**_SEARCHED_MODEL, "architecture": "A|I D|I A|I"}
    folder = _write_search(
        tmp_path / "s", model, pi=[[0.9, 0.1, 0.0], [0.0, 0.3, 0.7], [0.6, 0.4, 0.0]]
    )
    results = json.loads((folder / "results.json").read_text())
    results["candidates"] = names
    (folder / "results.json").write_text(json.dumps(results))
    config = config_from_search(folder, TrainConfig(), explicit=set())
    assert config.model.architecture == "A D A"


def test_a_stage_2_does_not_inherit_how_its_search_started(tmp_path):
    folder = _write_search(tmp_path / "s", _SEARCHED_MODEL, {"init_from": "/runs/txl"})
    assert config_from_search(folder, TrainConfig(), explicit=set()).init_from is None
    given = TrainConfig(init_from=str(folder))
    assert config_from_search(folder, given, explicit={"init_from"}).init_from == str(folder)


def test_model_flags_are_checked_with_the_search_fields_they_join(tmp_path):
    """--num_heads=3 divides the search's d_model 12, not ModelConfig's default 128: a
    stage 2 judges the flags given with the search's model, not alone."""
    folder = _write_search(tmp_path / "s", {**_SEARCHED_MODEL, "d_model": 12})
    config = config_from_search(folder, TrainConfig(), explicit=set(), model={"num_heads": 3})
    assert (config.model.d_model, config.model.num_heads) == (12, 3)
    with pytest.raises(ConfigError, match="not divisible by num_heads=5"):
        config_from_search(folder, TrainConfig(), explicit=set(), model={"num_heads": 5})


def test_a_search_of_the_previous_format_is_refused_naming_both_formats(tmp_path):
    """results.json of format 3 (before --mix_directory and --drop_attention_to were
    settings every file holds): refused in one line naming both formats and the fix."""
    folder = _write_search(tmp_path / "s", _SEARCHED_MODEL)
    results = json.loads((folder / "results.json").read_text())
    results["format"] = 3
    (folder / "results.json").write_text(json.dumps(results))
    with pytest.raises(
        Exception, match=r"earlier partf \(format 3; this partf reads format 4\)"
    ) as e:
        config_from_search(folder, TrainConfig(), explicit=set())
    assert "\n" not in str(e.value) and "retrain it" in str(e.value)
