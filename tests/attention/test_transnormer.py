"""TransNormer's NormAttention and DiagAttention against independent references."""

import numpy as np
import pytest

from partf.attention import create_attention, get_attention_class
from partf.attention.transnormer import DiagAttention, NormAttention
from tests.attention import references
from tests.attention.helpers import (
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    check_attend,
    random_heads,
    random_state,
    random_tokens,
)
from tests.layer_checks import assert_config_round_trip


def settings(layer):
    """The reference's config and the output normalisation's weights (layer norm)."""
    config = {"norm_type": layer.norm_type}
    weights = {}
    if layer.norm_type == "layer":
        config["norm_epsilon"] = layer.output_norm.epsilon
        rng = np.random.default_rng(4)
        shape = layer.output_norm.gamma.shape
        layer.output_norm.gamma.assign(rng.normal(size=shape).astype("float32") + 1.0)
        layer.output_norm.beta.assign(rng.normal(size=shape).astype("float32"))
        weights = {"norm_gamma": layer.output_norm.gamma, "norm_beta": layer.output_norm.beta}
    return config, weights


@pytest.mark.parametrize(
    "batch,length,heads,dim,chunk,feature_map,norm_type",
    [
        (1, 7, 1, 4, 4, "elu", "simple_rms"),
        (2, 23, 3, 4, 8, "elu+1", "layer"),
        (2, 12, 2, 3, 64, "relu", "none"),
    ],
)
def test_norm_matches_reference(batch, length, heads, dim, chunk, feature_map, norm_type):
    layer = NormAttention(
        heads * dim, heads, chunk_size=chunk, feature_map=feature_map, norm_type=norm_type
    )
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    config, weights = settings(layer)
    config["feature_map"] = feature_map
    check_attend(layer, references.norm, config, q, k, v, state, mask, variables=weights, rtol=2e-4)


@pytest.mark.parametrize(
    "batch,length,heads,dim,window,activation,norm_type",
    [
        (1, 7, 1, 4, 3, "softmax", "simple_rms"),
        (2, 23, 3, 4, 8, "softmax", "layer"),
        (2, 5, 2, 3, 16, "relu", "simple_rms"),
        (2, 13, 2, 3, 4, "relu", "none"),
    ],
)
def test_diag_matches_reference(batch, length, heads, dim, window, activation, norm_type):
    layer = DiagAttention(
        heads * dim, heads, window_size=window, diag_activation=activation, norm_type=norm_type
    )
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    config, weights = settings(layer)
    config.update(window_size=window, diag_activation=activation)
    check_attend(layer, references.diag, config, q, k, v, state, mask, variables=weights, rtol=2e-4)


@pytest.mark.parametrize(
    "name,options", [("norm", {"chunk_size": 4}), ("diag", {"window_size": 5})]
)
def test_segments_equal_one_call(name, options):
    layer = create_attention(name, 12, 3, **options)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


@pytest.mark.parametrize(
    "name,options", [("norm", {"chunk_size": 4}), ("diag", {"window_size": 4})]
)
def test_causal(name, options):
    layer = create_attention(name, 12, 3, **options)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("norm", {"chunk_size": 8})
    assert_finite_on_large_inputs("diag", {"window_size": 4, "diag_activation": "relu"})
    assert_finite_on_large_inputs("diag", {"window_size": 4})


def test_config_round_trip_and_validation():
    assert get_attention_class("norm") is NormAttention
    assert get_attention_class("diag") is DiagAttention
    norm = NormAttention(12, 3, chunk_size=5, feature_map="relu", norm_type="layer")
    clone = assert_config_round_trip(norm)
    assert (clone.chunk_size, clone.feature_map, clone.norm_type) == (5, "relu", "layer")
    diag = DiagAttention(12, 3, window_size=7, diag_activation="relu", norm_type="none")
    clone = assert_config_round_trip(diag)
    assert (clone.window_size, clone.diag_activation, clone.norm_type) == (7, "relu", "none")
    with pytest.raises(ValueError, match="unknown feature_map 'tanh'; choose one of"):
        NormAttention(12, 3, feature_map="tanh")
    with pytest.raises(ValueError, match="unknown diag_activation"):
        DiagAttention(12, 3, diag_activation="gelu")
