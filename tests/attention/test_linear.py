"""Linear attention (elu + 1) against its independent token-by-token reference."""

import numpy as np
import pytest

from partf.attention import create_attention, get_attention_class
from partf.attention.linear import LinearAttention
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


@pytest.mark.parametrize(
    "batch,length,heads,dim,chunk",
    [(1, 7, 1, 4, 4), (2, 23, 3, 4, 8), (2, 16, 2, 3, 64)],
)
def test_matches_reference(batch, length, heads, dim, chunk):
    layer = LinearAttention(heads * dim, heads, chunk_size=chunk)
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    state["z"] = np.abs(state["z"])  # sums of positive features
    check_attend(layer, references.linear, {}, q, k, v, state, mask)


def test_segments_equal_one_call():
    layer = create_attention("linear", 12, 3, chunk_size=4)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_causal():
    layer = create_attention("linear", 12, 3, chunk_size=4)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("linear", {"chunk_size": 8})


def test_config_round_trip_and_validation():
    assert get_attention_class("linear") is LinearAttention
    layer = LinearAttention(12, 3, chunk_size=5, head_dim=6, use_bias=True)
    assert assert_config_round_trip(layer).chunk_size == 5
    with pytest.raises(ValueError, match="chunk_size must be positive"):
        LinearAttention(12, 3, chunk_size=0)
    assert not LinearAttention(12, 3, causal=False).causal  # tests/attention/test_noncausal.py


def test_state_stays_float32_under_mixed_precision():
    """Keras would cast call arguments to bfloat16; the carried sums must not be."""
    layer = LinearAttention(8, 2, dtype="mixed_bfloat16")
    x, _ = random_tokens(1, 3, 8)
    state = layer.get_initial_state(1)
    state = {name: value + 1.0 + 2.0**-12 for name, value in state.items()}  # not a bfloat16
    _, new = layer(x, state=state, mask=np.zeros((1, 3), bool))  # nothing new to add
    for name, value in new.items():
        assert value.dtype == "float32"
        np.testing.assert_array_equal(np.asarray(value), np.asarray(state[name]), err_msg=name)
