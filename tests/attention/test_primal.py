"""Primal-Attention against the authors' causal form written out, and its KSVD loss."""

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.attention import create_attention, get_attention_class
from partf.attention.primal import PrimalAttention
from tests.attention.helpers import (
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    random_tokens,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


def reference(layer, x, mask):
    """Running means of q and k (explicit averaging matrix), l2-normalised,
    projected by W_e and W_r, combined; the KSVD objective as in the authors'
    criterion (Lambda as a diagonal matrix, trace of the head-mean of W_e^T W_r)."""
    f64 = lambda t: ops.cast(t, "float64")
    q, k = f64(layer.query_dense(x)), f64(layer.key_dense(x))
    length = x.shape[1]
    valid = np.asarray(mask, "float64")
    average = np.tril(np.ones((length, length)))[None] * valid[:, None, :]  # [B, t, j]
    average = average / np.maximum(average.sum(-1, keepdims=True), 1.0)
    unit = lambda t: t / ops.maximum(ops.norm(t, axis=-1, keepdims=True), 1e-12)
    q_hat = unit(ops.einsum("btj,bjhd->bthd", average, q))
    k_hat = unit(ops.einsum("btj,bjhd->bthd", average, k))
    e = ops.einsum("bthd,hds->bths", q_hat, f64(layer.w_e))
    r = ops.einsum("bthd,hds->bths", k_hat, f64(layer.w_r))
    out = layer.combine(ops.cast(ops.concatenate([e, r], axis=-1), "float32"))
    y = layer.output_dense(out)

    lam = np.stack([np.diag(row) for row in to_np(layer.lam)])  # [H, s, s]
    tokens = valid.sum(1) * layer.num_heads

    def energy(scores):
        scaled = ops.einsum("bths,hsu->bthu", scores, lam)
        per_token = ops.sum(scaled**2, axis=(2, 3)) * valid
        return ops.sum(per_token, axis=1) / tokens / 2.0

    head_mean = ops.mean(ops.einsum("hps,hpd->hsd", f64(layer.w_e), f64(layer.w_r)), axis=0)
    trace = ops.trace(head_mean)
    ksvd = ops.mean((energy(e) + energy(r) - trace) ** 2)
    return y, layer.eta * ksvd


@pytest.mark.parametrize("batch,length,heads,dim,rank", [(1, 7, 1, 4, 3), (2, 23, 3, 4, 5)])
def test_matches_reference_with_ksvd_loss(batch, length, heads, dim, rank):
    layer = PrimalAttention(heads * dim, heads, low_rank=rank, eta=0.3, use_bias=True, seed=2)
    x, mask = random_tokens(batch, length, heads * dim)
    mask[:, 0] = True  # the loss averages over real tokens: keep at least one
    y, _ = layer(x, mask=mask)
    assert len(layer.losses) == 1
    want_y, want_loss = reference(layer, x, mask)
    np.testing.assert_allclose(to_np(y), to_np(want_y), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(to_np(layer.losses[0]), to_np(want_loss), rtol=1e-4)

    def grads(fn):
        variable = tf.Variable(x)
        with tf.GradientTape() as tape:
            out, loss = fn(variable)
            total = tf.reduce_sum(tf.cast(out, tf.float64) * np.linspace(-1, 1, out.shape[-1]))
            total = total + 10.0 * tf.cast(loss, tf.float64)
        return to_np(tape.gradient(total, variable))

    def fast(v):
        out, _ = layer(v, mask=mask)
        return out, layer.losses[0]

    np.testing.assert_allclose(
        grads(fast), grads(lambda v: reference(layer, v, mask)), rtol=1e-3, atol=1e-5
    )


def test_eta_zero_adds_no_loss_and_no_value_weights():
    layer = PrimalAttention(8, 2, low_rank=3, eta=0.0)
    x, mask = random_tokens(1, 5, 8)
    layer(x, mask=mask)
    assert layer.losses == []
    # Values are never read: no value projection to train.
    assert not any("value" in w.path for w in layer.weights)


def test_segments_equal_one_call():
    layer = create_attention("primal", 12, 3, low_rank=4)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_causal():
    layer = create_attention("primal", 12, 3, low_rank=4)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("primal", {"low_rank": 4})


def test_config_round_trip_and_validation():
    assert get_attention_class("primal") is PrimalAttention
    layer = PrimalAttention(12, 3, low_rank=7, eta=0.25, seed=4, dropout_rate=0.1)
    clone = assert_config_round_trip(layer)
    assert (clone.low_rank, clone.eta, clone.seed) == (7, 0.25, 4)
    with pytest.raises(ValueError, match="low_rank must be positive"):
        PrimalAttention(12, 3, low_rank=0)
    with pytest.raises(ValueError, match="eta must be >= 0"):
        PrimalAttention(12, 3, eta=-1.0)
