"""Softmax attention with key/value memory against its independent reference."""

import numpy as np
import pytest

from partf.attention import create_attention, get_attention_class
from partf.attention.softmax import SoftmaxAttention
from tests.attention import references
from tests.attention.helpers import (
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    check_attend,
    random_heads,
    random_state,
    random_tokens,
    run_segments,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


@pytest.mark.parametrize(
    "batch,length,heads,dim,mem_len,causal",
    [
        (1, 7, 1, 4, 0, True),
        (2, 23, 3, 4, 5, True),
        (2, 9, 2, 3, 12, True),
        (2, 11, 2, 4, 3, False),
    ],
)
def test_matches_reference(batch, length, heads, dim, mem_len, causal):
    layer = SoftmaxAttention(heads * dim, heads, mem_len=mem_len, causal=causal)
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    config = {"mem_len": mem_len, "causal": causal}
    check_attend(layer, references.softmax, config, q, k, v, state, mask)


def test_memory_holds_the_last_keys_and_values():
    layer = SoftmaxAttention(8, 2, mem_len=4)
    x, mask = random_tokens(2, 10, 8)
    _, state = layer(x, mask=mask)
    keys = to_np(layer.key_dense(x))
    np.testing.assert_allclose(to_np(state["mem_k"]), keys[:, -4:], rtol=1e-6)
    np.testing.assert_array_equal(to_np(state["mem_valid"]), mask[:, -4:])


def test_segments_equal_one_call_when_memory_covers_the_stream():
    layer = create_attention("softmax", 12, 3, mem_len=40)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_short_memory_keeps_the_newest_tokens_across_segments():
    layer = create_attention("softmax", 12, 3, mem_len=8)
    x, mask = random_tokens(2, 37, 12)
    _, whole = layer(x, mask=mask)
    _, seg = run_segments(layer, x, mask)
    for name in ("mem_k", "mem_v", "mem_valid"):
        np.testing.assert_allclose(
            seg[name], to_np(whole[name]), rtol=1e-5, atol=1e-6, err_msg=name
        )


def test_causal():
    layer = create_attention("softmax", 12, 3, mem_len=4)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("softmax", {"mem_len": 6})


def test_config_round_trip_and_registry():
    assert get_attention_class("softmax") is SoftmaxAttention
    layer = SoftmaxAttention(12, 3, mem_len=7, head_dim=5, dropout_rate=0.2, use_bias=True)
    assert assert_config_round_trip(layer).mem_len == 7
    with pytest.raises(ValueError, match="mem_len must be >= 0"):
        SoftmaxAttention(12, 3, mem_len=-1)
