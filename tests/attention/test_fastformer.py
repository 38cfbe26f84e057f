"""Causal Fastformer against an independent step-by-step recurrence of equations 6 to 8."""

import numpy as np
import pytest

from partf.attention import create_attention, get_attention_class
from partf.attention.fastformer import FastformerAttention
from tests.attention import references
from tests.attention.helpers import (
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    check_attend,
    random_heads,
    random_tokens,
)
from tests.layer_checks import assert_config_round_trip


def make_state(batch, heads, dim, seed=5):
    rng = np.random.default_rng(seed)
    state = {}
    for prefix in ("q_", "k_"):
        state[prefix + "s"] = rng.normal(size=(batch, heads, 1, dim)).astype("float32")
        state[prefix + "z"] = np.abs(rng.normal(size=(batch, heads, 1))).astype("float32") + 0.5
        state[prefix + "m"] = rng.normal(size=(batch, heads)).astype("float32")
    return state


@pytest.mark.parametrize("start", ["carried", "empty"])
@pytest.mark.parametrize(
    "batch,length,heads,dim,chunk,use_bias",
    [(1, 7, 1, 4, 4, False), (2, 23, 3, 4, 8, True), (2, 12, 2, 6, 64, False)],
)
def test_matches_step_by_step_recurrence(batch, length, heads, dim, chunk, use_bias, start):
    """Outputs, both pooling states (sums relative to exp(m), and m) and the gradients
    (inputs, pooling vectors, transform) equal the reference's."""
    layer = FastformerAttention(heads * dim, heads, chunk_size=chunk, use_bias=use_bias)
    layer.build((None, None, heads * dim))
    rng = np.random.default_rng(2)
    # Pooling vectors large enough that the weights are far from uniform.
    layer.query_pool.assign(rng.normal(size=(heads, dim)).astype("float32"))
    layer.key_pool.assign(rng.normal(size=(heads, dim)).astype("float32"))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = make_state(batch, heads, dim)
    if start == "empty":
        state = {name: np.zeros_like(value) for name, value in state.items()}
        mask[0, :3] = False  # a stream that starts with padding
    weights = {
        "query_pool": layer.query_pool,
        "key_pool": layer.key_pool,
        "transform_kernel": layer.transform.kernel,
    }
    if use_bias:
        layer.transform.bias.assign(rng.normal(size=(heads, dim)).astype("float32"))
        weights["transform_bias"] = layer.transform.bias
    check_attend(layer, references.fastformer, {}, q, k, v, state, mask, variables=weights)


def test_segments_equal_one_call():
    layer = create_attention("fastformer", 12, 3, chunk_size=4)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_causal():
    layer = create_attention("fastformer", 12, 3, chunk_size=4)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("fastformer", {"chunk_size": 8})


def test_config_round_trip_and_validation():
    assert get_attention_class("fastformer") is FastformerAttention
    layer = FastformerAttention(12, 3, chunk_size=6, use_bias=True, dropout_rate=0.1)
    assert assert_config_round_trip(layer).chunk_size == 6
    with pytest.raises(ValueError, match="chunk_size must be positive"):
        FastformerAttention(12, 3, chunk_size=-1)
