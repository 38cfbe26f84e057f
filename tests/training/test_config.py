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
    assert TrainConfig(model=model).model == model  # no preset: every field is given
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


def test_a_saved_config_lacking_a_setting_is_refused_not_defaulted():
    """A setting added since a file was written makes a new format; a file of this format
    lacking one (--mix_directory here) is refused rather than read with today's default."""
    from partf.serialization import FormatError
    from partf.training.checkpoint import config_differences
    from partf.training.config import check_saved_config

    model = ModelConfig(vocab_size=100, batch_size=8, tau_steps=10, cutoffs=(50,)).to_dict()
    current = {"model": model, "training": TrainConfig().training_dict()}
    check_saved_config(current, "a checkpoint")
    mixed = TrainConfig(mix_directory="mqar_train", mix_every=2).training_dict()
    assert config_differences(current, {"model": model, "training": mixed}) == [
        "mix_every: 1 -> 2"  # the folder may move, as the records may
    ]
    older = {"model": model, "training": dict(current["training"])}
    del older["training"]["mix_directory"]
    with pytest.raises(FormatError, match="lacks mix_directory, which every format 4"):
        check_saved_config(older, "an older checkpoint")
