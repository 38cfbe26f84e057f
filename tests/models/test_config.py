"""ModelConfig: validation, JSON round trip, architecture strings."""

import dataclasses
import json

import pytest

from partf.attention import get_attention_class
from partf.layers.stochastic_block import BlockSettings
from partf.models.config import ModelConfig
from partf.serialization import FORMAT_VERSION, FormatError
from partf.training.config import TrainConfig


def test_each_setting_is_declared_once():
    """ModelConfig extends BlockSettings: the block's settings are the model's first
    fields, declared in the layer's module alone; no training setting shares a name."""
    block = [field.name for field in dataclasses.fields(BlockSettings)]
    assert [field.name for field in dataclasses.fields(ModelConfig)][: len(block)] == block
    assert not set(ModelConfig.__annotations__) & set(block)
    training = {field.name for field in dataclasses.fields(TrainConfig)}
    assert not training & {field.name for field in dataclasses.fields(ModelConfig)}


def test_a_saved_config_lacking_a_field_is_refused_but_a_given_dict_takes_defaults():
    values = ModelConfig(vocab_size=50, cutoffs=()).to_dict()
    del values["tau_end"], values["vocab_size"]
    with pytest.raises(FormatError) as caught:
        ModelConfig.from_dict(values, saved="run/config.json")
    assert str(caught.value) == (
        f"run/config.json lacks vocab_size, tau_end, which every format {FORMAT_VERSION} file "
        """holds: add them to it with the values its run used (this partf's defaults: """
        """{"tau_end": 0.1}), or use the partf that wrote it"""
    )
    given = ModelConfig.from_dict({"vocab_size": 50, "cutoffs": []})
    assert given == ModelConfig(vocab_size=50, cutoffs=())


def test_json_round_trip_with_non_defaults():
    config = ModelConfig(
        vocab_size=500,
        d_model=24,
        num_heads=3,
        d_ffn=40,
        num_layers=3,
        mem_len=7,
        dropout_rate=0.2,
        cutoffs=(50, 200),
        proj_factor=2,
        proj_dims=(8, 4),
        straight_through=True,
        clamp_len=9,
        attention="relative",
        attention_options={"head_dim": 4},
        candidates=("relative", "dense"),
        architecture="A D relative",
        eval_mode="expected",
        sample_per_example=True,
        tau_start=2.0,
        tau_end=0.3,
        tau_schedule="cosine",
        tau_steps=1000,
        tau_is_trainable=True,
        batch_size=8,
    )
    values = json.loads(json.dumps(config.to_dict()))
    assert values["cutoffs"] == [50, 200]
    assert ModelConfig.from_dict(values) == config
    assert ModelConfig(**values).cutoffs == (50, 200)  # lists are stored as tuples


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"d_model": 10, "num_heads": 4}, "not divisible by num_heads=4"),
        ({"mem_len": -1}, "mem_len must be >= 0"),
        ({"cutoffs": (20, 10)}, "sorted and unique"),
        ({"cutoffs": (10, 10)}, "sorted and unique"),
        ({"cutoffs": (0,)}, "must be positive"),
        ({"cutoffs": (10, 100)}, "below vocab_size=100"),
        ({"proj_dims": (4,)}, "proj_dims has 1 entries"),
        ({"tie_embeddings": True}, "plain softmax only"),
        ({"attention": "nope"}, "unknown attention 'nope'"),
        ({"candidates": ("attention", "conv")}, "unknown candidate 'conv'"),
        ({"candidates": ()}, "candidates is empty"),
        ({"architecture": "A X"}, "unknown architecture token 'X'"),
        ({"architecture": "A D"}, "has 2 blocks but num_layers=6"),
        ({"eval_mode": "mean"}, "unknown eval_mode 'mean'"),
        ({"tau_schedule": "step"}, "unknown tau_schedule 'step'"),
        ({"tau_end": 0.0}, "must be positive"),
        ({"tau_steps": 0}, "tau_steps must be >= 1"),
        ({"dropout_rate": 1.0}, "dropout_rate must be in"),
        ({"clamp_len": 0}, "clamp_len must be positive"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"attention_options": {"f": object()}}, "plain JSON values"),
    ],
)
def test_validation(changes, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{"vocab_size": 100, "cutoffs": (10, 50), **changes})


def test_unknown_field_in_dict():
    with pytest.raises(ValueError, match=r"unknown ModelConfig fields \['max_position'\]"):
        ModelConfig.from_dict({"vocab_size": 100, "max_position": 512})


def _eva_mask(config, name="eva"):
    """The chunk mask the config's EVA layer is built with."""
    from partf.attention import create_attention

    return create_attention(name, 8, 2, **config.attention_options).chunk_mask


@pytest.mark.parametrize(
    "fields",
    [
        {"architecture": "eva D"},
        # A search with EVA among its candidates only.
        {"attention": "relative", "candidates": ("attention", "eva", "dense")},
    ],
    ids=["fixed", "search_candidate"],
)
def test_the_options_are_written_out_and_a_saved_dict_keeps_them(fields):
    """Every option of the chosen mechanisms is written out with its default when a run
    resolves its config (EVA's chunk_mask is the authors'), so its dict builds the same
    EVA whatever the defaults later: the saved options, not the defaults, decide what is
    built; an option set stays."""
    from partf.training.resolve import resolve_model

    def resolved(**given):
        data = dict(vocab_size=50, batch_size=32, tau_steps=1)
        return resolve_model(given, objective="causal", search="par", **data)

    new = resolved(cutoffs=(), num_layers=2, **fields)
    assert ModelConfig.from_dict(json.loads(json.dumps(new.to_dict()))) == new
    eva = get_attention_class("eva").options
    for option, (default, _) in eva.items():
        assert new.attention_options[f"eva_{option}"] == default
    assert _eva_mask(new) == "authors"

    saved = json.loads(json.dumps(new.to_dict()))
    saved["attention_options"] = {**saved["attention_options"], "eva_chunk_mask": "partf"}
    assert _eva_mask(ModelConfig.from_dict(saved)) == "partf"

    chosen = resolved(cutoffs=(), num_layers=2, attention_options={"chunk_mask": "partf"}, **fields)
    chosen.check_attention_options()
    assert _eva_mask(chosen) == "partf"
    assert chosen.attention_options["eva_chunk_mask"] == "partf"


def test_a_non_causal_config_records_no_memory_and_no_adaptive_softmax():
    """causal=False (objective mlm's encoder) records mem_len 0 and no cutoffs, whatever
    was given for the causal model; the causal model refuses it."""
    from partf.models import PARTransformerXL

    config = ModelConfig(vocab_size=50, mem_len=16, cutoffs=(20,), proj_dims=(4,), causal=False)
    assert (config.mem_len, config.cutoffs, config.proj_dims) == (0, (), None)
    assert ModelConfig.from_dict(config.to_dict()) == config
    assert ModelConfig(vocab_size=50, cutoffs=(20,)).causal
    with pytest.raises(ValueError, match="causal=False is the bidirectional Encoder's"):
        PARTransformerXL(config)


# ----------------------------------------------------- before the data is read
DRAFT = dict(vocab_size=None, batch_size=None, tau_steps=None)


def test_a_config_without_its_data_checks_the_rest_and_cannot_build_a_model():
    from partf.models import PARTransformerXL

    draft = ModelConfig(**DRAFT, d_model=16, num_heads=2, cutoffs=(50,))
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        ModelConfig(**DRAFT, d_model=16, num_heads=3)
    with pytest.raises(ValueError, match="sorted and unique"):
        ModelConfig(**DRAFT, cutoffs=(50, 20))
    with pytest.raises(ValueError, match=r"no vocab_size, batch_size, tau_steps yet"):
        PARTransformerXL(draft)
    # The checks that need the vocabulary run once it is given.
    with pytest.raises(ValueError, match="cutoffs must be below vocab_size=40"):
        draft.replace(vocab_size=40, batch_size=2, tau_steps=10)
    # Nor does a config whose position waits for the run to resolve it.
    with pytest.raises(ValueError, match="position 'auto' is chosen when a run resolves"):
        PARTransformerXL(ModelConfig(vocab_size=60, cutoffs=(50,), position="auto"))
