"""ModelConfig: validation, JSON round trip, architecture strings."""

import json

import pytest

from partf.models.config import ModelConfig, architecture_token, parse_architecture


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


def test_architecture_parsing():
    assert parse_architecture("A a,D  I relative") == (
        "attention",
        "attention",
        "dense",
        "identity",
        "relative",
    )
    assert [architecture_token(n) for n in ("attention", "dense", "identity", "performer")] == [
        "A",
        "D",
        "I",
        "performer",
    ]
    config = ModelConfig(vocab_size=100, cutoffs=(), num_layers=3, architecture="A D I")
    assert config.block_candidates == (("attention",), ("dense",), ("identity",))
    assert not config.is_stochastic
    assert ModelConfig(vocab_size=100, cutoffs=()).is_stochastic


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
