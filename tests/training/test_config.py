"""TrainConfig: its model is a ModelConfig without the data's fields, made once."""

from __future__ import annotations

import json

import pytest

from partf.models.config import ModelConfig
from partf.training.config import ConfigError, TrainConfig

DRAFT = dict(vocab_size=None, batch_size=None, tau_steps=None)


def test_a_mapping_becomes_the_model_config_with_the_presets():
    config = TrainConfig(model={"d_model": 16, "num_heads": 2, "cutoffs": [20]})
    assert isinstance(config.model, ModelConfig) and config.model.cutoffs == (20,)
    assert (config.model.vocab_size, config.model.batch_size, config.model.tau_steps) == (
        None,
        None,
        None,
    )
    assert config.model.arch_parameterization == "probabilities"  # --search=original
    mlm = TrainConfig(objective="mlm", model={"d_model": 16, "num_heads": 2})
    assert mlm.model.causal is False and mlm.model.arch_parameterization == "logits"


def test_a_model_config_is_taken_as_given():
    model = ModelConfig(**DRAFT, d_model=16, num_heads=2)
    assert TrainConfig(model=model).model is model  # no preset: every field is given
    assert TrainConfig(model=model, objective="mlm").model.causal is False


@pytest.mark.parametrize("model", [{"vocab_size": 100}, ModelConfig(vocab_size=None)])
def test_the_data_fields_are_refused(model):
    # ModelConfig's own defaults of batch_size and tau_steps are set values too.
    with pytest.raises(ConfigError, match="comes from the data and the run's length"):
        TrainConfig(model=model)


def test_bad_model_settings_are_a_config_error_in_one_sentence():
    with pytest.raises(ConfigError, match=r"^d_model=10 is not divisible by num_heads=3;.*\.$"):
        TrainConfig(model={"d_model": 10, "num_heads": 3})
    with pytest.raises(ConfigError, match="unexpected keyword argument 'bogus'"):
        TrainConfig(model={"bogus": 1})


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"objective": "mlm", "model": {"position": "auto", "candidates": ("softmax", "dense")}},
        {"search": "par", "model": {"attention": "eva", "attention_options": {"window_size": 8}}},
    ],
)
def test_json_round_trip(changes):
    config = TrainConfig(model_name="r", **changes)
    values = json.loads(json.dumps(config.to_dict()))
    assert values["model"] == config.model.to_dict() and values["model"]["vocab_size"] is None
    assert TrainConfig.from_dict(values) == config


def test_a_saved_config_from_before_the_later_settings_reads_them_as_off():
    """A checkpoint or results.json written before --mix_directory and its kin (or
    --drop_attention_to) existed lacks them: it is read with each at the value that run
    trained with, so it resumes (no difference from a run of the same flags) and gives its
    stage 2; another missing setting is still refused."""
    from partf.serialization import FormatError
    from partf.training.checkpoint import config_differences
    from partf.training.config import LATER_SETTINGS, check_saved_config, with_later_settings

    model = ModelConfig(vocab_size=100, batch_size=8, tau_steps=10, cutoffs=(50,)).to_dict()
    current = {"model": model, "training": TrainConfig().training_dict()}
    older = {"model": model, "training": dict(current["training"])}
    for name in LATER_SETTINGS:
        del older["training"][name]
    check_saved_config(older, "an older checkpoint")
    assert with_later_settings(older) == current
    assert config_differences(with_later_settings(older), current) == []
    mixed = TrainConfig(mix_directory="mqar_train", mix_every=2).training_dict()
    assert config_differences(with_later_settings(older), {"model": model, "training": mixed}) == [
        "mix_every: 1 -> 2"  # the folder may move, as the records may
    ]
    del older["training"]["epochs"]
    with pytest.raises(FormatError, match="lacks epochs, which every format"):
        check_saved_config(older, "an older checkpoint")
