"""Causal Fastformer against the step-by-step recurrence of equations 6 to 8."""

import math

import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention, get_attention_class
from partf.attention.fastformer import FastformerAttention
from tests.attention.helpers import (
    assert_attend_matches,
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    random_heads,
    random_tokens,
)
from tests.layer_checks import assert_config_round_trip


def pool_step_by_step(x, logits, s, z, mask):
    """s_i = s_{i-1} + exp(a_i) x_i; z_i = z_{i-1} + exp(a_i); g_i = s_i / z_i (float64)."""
    pooled = []
    for t in range(x.shape[1]):
        weight = ops.exp(logits[:, t]) * np.asarray(mask, "float64")[:, t, None]  # [B, H]
        s = s + weight[..., None] * x[:, t]
        z = z + weight
        pooled.append(s / ops.where(z > 0, z, 1.0)[..., None])
    return ops.stack(pooled, axis=1)


def reference(layer, q, k, v, state, mask):
    q, k, v = (ops.cast(x, "float64") for x in (q, k, v))
    scale = 1.0 / math.sqrt(layer.head_dim)

    def initial(prefix):  # the layer's sums are relative to exp(m)
        m = ops.cast(state[prefix + "m"], "float64")
        return (
            ops.cast(state[prefix + "s"][:, :, 0], "float64") * ops.exp(m)[..., None],
            ops.cast(state[prefix + "z"][:, :, 0], "float64") * ops.exp(m),
        )

    w_q = ops.cast(layer.query_pool, "float64")
    global_q = pool_step_by_step(
        q, ops.einsum("bthd,hd->bth", q, w_q) * scale, *initial("q_"), mask
    )
    mixed = global_q * k
    w_k = ops.cast(layer.key_pool, "float64")
    global_k = pool_step_by_step(
        mixed, ops.einsum("bthd,hd->bth", mixed, w_k) * scale, *initial("k_"), mask
    )
    u = ops.cast(global_k * v, "float32")
    return layer.transform(u) + ops.cast(q, "float32"), {}


def make_state(batch, heads, dim, seed=5):
    rng = np.random.default_rng(seed)
    state = {}
    for prefix in ("q_", "k_"):
        state[prefix + "s"] = rng.normal(size=(batch, heads, 1, dim)).astype("float32")
        state[prefix + "z"] = np.abs(rng.normal(size=(batch, heads, 1))).astype("float32") + 0.5
        state[prefix + "m"] = rng.normal(size=(batch, heads)).astype("float32")
    return state


@pytest.mark.parametrize(
    "batch,length,heads,dim,chunk",
    [(1, 7, 1, 4, 4), (2, 23, 3, 4, 8), (2, 12, 2, 6, 64)],
)
def test_matches_step_by_step_recurrence(batch, length, heads, dim, chunk):
    layer = FastformerAttention(heads * dim, heads, chunk_size=chunk)
    layer.build((None, None, heads * dim))
    rng = np.random.default_rng(2)
    # Pooling vectors large enough that the weights are far from uniform.
    layer.query_pool.assign(rng.normal(size=(heads, dim)).astype("float32"))
    layer.key_pool.assign(rng.normal(size=(heads, dim)).astype("float32"))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = make_state(batch, heads, dim)
    assert_attend_matches(layer, lambda *a: reference(layer, *a), q, k, v, state, mask)


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
