"""Architecture strings: tokens and names, presets expanded to the blocks they stand
for, and searched blocks ('A|I') parsed per block."""

from __future__ import annotations

import pytest

from partf.models.architecture import (
    architecture_token,
    expand_architecture,
    parse_architecture,
    parse_block_candidates,
)
from partf.models.config import ModelConfig

TINY = dict(vocab_size=40, d_model=8, num_heads=2, d_ffn=16, mem_len=4, cutoffs=(), batch_size=2)


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
    "preset,layers,expected",
    [
        ("plain", 4, "A D A D"),
        ("transnormer", 8, "diag D diag D norm D norm D"),
        ("transnormer", 6, "diag D diag D norm D"),
        ("TransNormer", 4, "diag D norm D"),
        ("primal_hybrid", 6, "softmax D softmax D primal D"),
        ("primal_hybrid", 2, "primal D"),
    ],
)
def test_presets_name_architecture_strings(preset, layers, expected):
    assert expand_architecture(preset, layers) == expected
    config = ModelConfig(**TINY, num_layers=layers, architecture=preset)
    assert config.architecture == expected  # stored as the string it stands for
    assert ModelConfig.from_dict(config.to_dict()) == config


def test_a_preset_needs_pairs_of_blocks_and_names_stay_attentions():
    with pytest.raises(ValueError, match="num_layers must be even, got 5"):
        ModelConfig(**TINY, num_layers=5, architecture="transnormer")
    # An attention name is one block of that attention, not a preset.
    assert ModelConfig(**TINY, num_layers=1, architecture="primal").architecture == "primal"


def test_searched_blocks_are_parsed_per_block():
    config = ModelConfig(vocab_size=300, num_layers=3, architecture="A|I D|I norm", cutoffs=())
    assert config.block_candidates == (("attention", "identity"), ("dense", "identity"), ("norm",))
    assert config.is_stochastic
    assert config.search_candidates == ("attention", "identity", "dense", "norm")
    assert parse_block_candidates("relative|norm|I D") == (
        ("relative", "norm", "identity"),
        ("dense",),
    )
    with pytest.raises(ValueError, match="fixed architecture names one candidate per block"):
        parse_architecture("A|I D")
    with pytest.raises(ValueError, match="names a candidate twice or none"):
        parse_block_candidates("A|A D")
    with pytest.raises(ValueError, match="unknown architecture token 'X'"):
        parse_block_candidates("A|X D")
    with pytest.raises(ValueError, match="only the causal model"):
        ModelConfig(vocab_size=300, num_layers=2, architecture="A|I D", causal=False, cutoffs=())
    # A fixed architecture is no search.
    fixed = ModelConfig(vocab_size=300, num_layers=2, architecture="A D", cutoffs=())
    assert not fixed.is_stochastic
