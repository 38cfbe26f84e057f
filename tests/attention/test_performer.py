"""Performer (FAVOR+) against the plain random-feature form (an independent reference),
and against softmax."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention, get_attention_class
from partf.attention.performer import PerformerAttention, draw_orthogonal_features
from tests.attention import references
from tests.attention.helpers import (
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    check_attend,
    explicit_softmax,
    random_heads,
    random_tokens,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


def make_state(layer, batch, seed=5):
    rng = np.random.default_rng(seed)
    heads, feat, dim = layer.num_heads, layer.num_features, layer.head_dim
    return {
        "s": rng.normal(size=(batch, heads, feat, dim)).astype("float32"),
        "z": np.abs(rng.normal(size=(batch, heads, feat))).astype("float32"),
        "m": rng.normal(size=(batch, heads)).astype("float32"),
    }


@pytest.mark.parametrize("start", ["carried", "empty"])
@pytest.mark.parametrize(
    "batch,length,heads,dim,features,chunk",
    [(1, 7, 1, 4, 6, 4), (2, 23, 3, 4, 16, 8), (2, 12, 2, 8, 8, 64)],
)
def test_matches_plain_random_feature_attention(batch, length, heads, dim, features, chunk, start):
    """Same random features: the stabilised chunked path equals the plain formula, the
    state's sums (relative to exp(m)) and m included."""
    layer = PerformerAttention(heads * dim, heads, num_features=features, chunk_size=chunk, seed=3)
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = make_state(layer, batch)
    if start == "empty":
        state = {name: np.zeros_like(value) for name, value in state.items()}
        mask[0, :3] = False  # a stream that starts with padding
    config = {"redraw": False}
    constants = {"projection": layer.projection}
    check_attend(
        layer, references.performer, config, q, k, v, state, mask, constants=constants,
        grad_rtol=2e-3,
    )  # fmt: skip


@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
def test_redraw_matches_reference(monkeypatch, training):
    """With redraw, an example whose state is empty takes fresh rows in training (the
    layer's own in evaluation) and keeps them in its state; the other example goes on
    with the rows its state holds."""
    heads, dim, features = 2, 4, 6
    layer = PerformerAttention(heads * dim, heads, num_features=features, redraw=True, seed=3)
    layer.build((None, None, heads * dim))
    rng = np.random.default_rng(8)
    fresh = rng.normal(size=(heads, features, dim)).astype("float32")
    monkeypatch.setattr(layer, "draw_features", lambda: ops.convert_to_tensor(fresh))
    q, k, v = random_heads(2, 9, heads, dim)
    _, mask = random_tokens(2, 9, 1, seed=1)
    state = make_state(layer, 2)
    state["projection"] = rng.normal(size=(2, heads, features, dim)).astype("float32")
    for name in ("s", "z"):
        state[name][0] = 0.0  # example 0 starts a new stream
    check_attend(
        layer, references.performer, {"redraw": True}, q, k, v, state, mask,
        constants={"projection": layer.projection}, training=training,
        extra={"fresh": fresh if training else None}, grad_rtol=2e-3,
    )  # fmt: skip


def test_approximates_softmax_attention_with_many_features():
    """With 8192 features the causal output is within 3% (relative L2) of
    exact softmax attention (256 features: about 6%)."""
    heads, dim, length = 2, 8, 16
    layer = PerformerAttention(heads * dim, heads, num_features=8192, seed=0)
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(1, length, heads, dim, seed=4, scale=0.5)
    out, _ = layer.attend(q, k, v, layer.get_initial_state(1))
    logits = ops.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(dim)
    causal = np.tril(np.ones((length, length), bool))[None, None]
    exact = ops.einsum("bhij,bjhd->bihd", explicit_softmax(logits, causal), v)
    error = np.linalg.norm(to_np(out) - to_np(exact)) / np.linalg.norm(to_np(exact))
    assert error < 0.03, error


def test_features_estimate_the_softmax_kernel_without_bias():
    """mean_r phi_r(q) phi_r(k) -> exp(q.k / sqrt(Dh)); orthogonal rows must
    point in uniformly random directions for this to hold."""
    rng = np.random.default_rng(0)
    q, k = (rng.normal(size=(1, 1, 1, 8)) * 0.6 for _ in range(2))
    rows = draw_orthogonal_features(1, 65536, 8, keras.random.SeedGenerator(0))
    rows = to_np(rows)
    features = [np.exp(references.favor_log_features(x, rows)) for x in (q, k)]
    estimate = np.mean(features[0] * features[1])
    np.testing.assert_allclose(estimate, np.exp(np.sum(q * k) / math.sqrt(8)), rtol=0.02)


def test_feature_rows_are_orthogonal_within_a_block():
    rows = to_np(draw_orthogonal_features(1, 12, 8, keras.random.SeedGenerator(0)))[0]
    unit = rows / np.linalg.norm(rows, axis=-1, keepdims=True)
    np.testing.assert_allclose(unit[:8] @ unit[:8].T, np.eye(8), atol=1e-5)
    # Lengths are those of Gaussian vectors, not all 1.
    assert np.std(np.linalg.norm(rows, axis=-1)) > 0.05


def test_redraw_keeps_one_draw_per_stream():
    layer = PerformerAttention(8, 2, num_features=4, redraw=True, seed=1)
    x, mask = random_tokens(2, 5, 8)
    _, first = layer(x, mask=mask, training=True)
    fixed = to_np(layer.projection)
    drawn = to_np(first["projection"])
    assert not np.allclose(drawn[0], fixed)  # a fresh draw for a new stream
    _, second = layer(x, state=first, mask=mask, training=True)
    np.testing.assert_array_equal(to_np(second["projection"]), drawn)  # kept while it lasts
    _, evaluated = layer(x, mask=mask, training=False)
    np.testing.assert_array_equal(to_np(evaluated["projection"])[1], fixed)


def test_segments_equal_one_call():
    layer = create_attention("performer", 12, 3, num_features=8, chunk_size=4)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_causal():
    layer = create_attention("performer", 12, 3, num_features=8, chunk_size=4)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("performer", {"num_features": 8, "chunk_size": 8})
    assert_finite_on_large_inputs("performer", {"num_features": 8, "redraw": True})


def test_config_round_trip_and_validation():
    assert get_attention_class("performer") is PerformerAttention
    layer = PerformerAttention(12, 3, num_features=7, redraw=True, chunk_size=5, seed=11)
    clone = assert_config_round_trip(layer)
    assert (clone.num_features, clone.redraw, clone.chunk_size, clone.seed) == (7, True, 5, 11)
    with pytest.raises(ValueError, match="num_features must be positive"):
        PerformerAttention(12, 3, num_features=0)
