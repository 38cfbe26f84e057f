"""Sliding-window attention against its independent reference."""

import pytest

from partf.attention import create_attention, get_attention_class
from partf.attention.local import LocalAttention
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
    "batch,length,heads,dim,window",
    [(1, 7, 1, 4, 3), (2, 23, 3, 4, 8), (2, 5, 2, 3, 16), (1, 12, 2, 2, 1)],
)
def test_matches_reference(batch, length, heads, dim, window):
    layer = LocalAttention(heads * dim, heads, window_size=window)
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    check_attend(layer, references.local, {"window_size": window}, q, k, v, state, mask)


def test_segments_equal_one_call():
    layer = create_attention("local", 12, 3, window_size=5)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_causal():
    layer = create_attention("local", 12, 3, window_size=4)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("local", {"window_size": 4})


def test_config_round_trip_and_validation():
    assert get_attention_class("local") is LocalAttention
    layer = LocalAttention(12, 3, window_size=9, dropout_rate=0.1, use_bias=True)
    assert assert_config_round_trip(layer).window_size == 9
    with pytest.raises(ValueError, match="window_size must be positive"):
        LocalAttention(12, 3, window_size=0)
