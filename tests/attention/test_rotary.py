"""Rotary positions in the mechanisms that take them (the rotation itself and the
position counting: test_positions.py).

The references here are written from the definitions, in float64 numpy: an explicit
2x2 rotation of each feature pair, the masked quadratic form of each mechanism with
rotated queries and keys (or rotated features, for linear attention).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention
from partf.attention.positions import apply_rotary
from tests.attention.helpers import (
    assert_causal,
    assert_segments_equal_one_call,
    random_heads,
    random_tokens,
    run_segments,
    to_np,
)
from tests.attention.references import rotate_reference

WIDTH, HEADS = 16, 2
#: Every mechanism with a query-key dot product, with small options.
ROTARY = {
    "softmax": dict(mem_len=40),
    "local": dict(window_size=5),
    "diag": dict(window_size=6),
    "linear": dict(chunk_size=4),
    "norm": dict(chunk_size=4),
    "performer": dict(num_features=8, chunk_size=4),
    "eva": dict(window_size=6, chunk_size=2, mem_chunks=3),
}


# ------------------------------------------------------------------- mechanisms
def make(name: str, **extra):
    layer = create_attention(name, WIDTH, HEADS, rotary=True, **{**ROTARY[name], **extra})
    layer.build((None, None, WIDTH))
    return layer


@pytest.mark.parametrize("name", sorted(ROTARY))
def test_segments_with_carried_positions_equal_one_call(name):
    layer = make(name)
    x, mask = random_tokens(2, 37, WIDTH, seed=1)
    assert_segments_equal_one_call(layer, x, mask)
    assert_causal(layer, x, mask, 20)
    _, state = layer(x, mask=mask)
    np.testing.assert_array_equal(to_np(state["position"]), mask.sum(axis=1))


@pytest.mark.parametrize("name", ["softmax", "local", "diag", "linear", "norm"])
def test_a_shifted_stream_start_changes_nothing(name):
    """Rotated scores depend on distances only, so a stream that starts at position
    5000 (the carried position) gives the same outputs as one that starts at 0.
    (Not EVA beyond its first window, whose chunk summaries pass the mean of rotated
    keys through a learned map, nor Performer, whose fixed random features are not
    rotation invariant: both are exact only in expectation or within a window.)"""
    layer = make(name)
    x, mask = random_tokens(2, 23, WIDTH, seed=2)
    y, _ = layer(x, mask=mask)
    state = layer.get_initial_state(2)
    state["position"] = ops.convert_to_tensor(np.array([5000, 123], "int32"))
    shifted, _ = layer(x, state=state, mask=mask)
    np.testing.assert_allclose(to_np(shifted), to_np(y), rtol=1e-3, atol=1e-4)


def _positions(mask: np.ndarray, start: np.ndarray) -> np.ndarray:
    return start[:, None] + np.cumsum(mask, axis=1) - mask


def test_softmax_equals_softmax_of_rotated_queries_and_keys():
    layer = make("softmax", mem_len=0)
    q, k, v = random_heads(2, 11, HEADS, WIDTH // HEADS, seed=3)
    _, mask = random_tokens(2, 11, 1, seed=4)
    start = np.array([0, 31])
    state = {"position": ops.convert_to_tensor(start.astype("int32"))}
    positions = _positions(mask, start)
    rq, rk = rotate_reference(q, positions), rotate_reference(k, positions)
    logits = np.einsum("bihd,bjhd->bhij", rq, rk) / math.sqrt(WIDTH // HEADS)
    visible = np.tril(np.ones((11, 11), bool))[None, None] & mask[:, None, None, :]
    logits = np.where(visible, logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    want = np.einsum("bhij,bjhd->bihd", weights, v)
    # The layer rotates the projections in `call`; do the same around `attend`.
    got, _ = layer.attend(apply_rotary(q, positions), apply_rotary(k, positions), v, state, mask)
    np.testing.assert_allclose(to_np(got), want, rtol=1e-4, atol=1e-5)
    # And `call` does rotate: the whole layer against its projections by hand.
    x, _ = random_tokens(2, 11, WIDTH, seed=5)
    y, _ = layer(x, state=state, mask=mask)
    qx, kx, vx = (
        to_np(dense(x)) for dense in (layer.query_dense, layer.key_dense, layer.value_dense)
    )
    rq, rk = rotate_reference(qx, positions), rotate_reference(kx, positions)
    logits = np.where(visible, np.einsum("bihd,bjhd->bhij", rq, rk) / math.sqrt(8), -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = np.einsum("bhij,bjhd->bihd", weights, vx)
    want = np.einsum("bihd,hdo->bio", out, to_np(layer.output_dense.kernel))
    np.testing.assert_allclose(to_np(y), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["linear", "norm"])
def test_linear_attentions_rotate_their_features(name):
    """RoFormer's linear form: numerator sum_j (R_i phi(q_i)) . (R_j phi(k_j)) v_j,
    denominator (linear) the unrotated sum_j phi(q_i) . phi(k_j); TransNormer's norm
    then normalises the unnormalised sum."""
    layer = make(name)
    q, k, v = random_heads(2, 13, HEADS, WIDTH // HEADS, seed=6)
    _, mask = random_tokens(2, 13, 1, seed=7)
    start = np.array([4, 0])
    state = layer.get_initial_state(2)
    state["position"] = ops.convert_to_tensor(start.astype("int32"))
    got, _ = layer.attend(q, k, v, state, mask)

    def phi(x):
        x = np.asarray(x, np.float64)
        elu = np.where(x > 0, x, np.exp(np.minimum(x, 0)) - 1)
        return elu + 1 if name == "linear" else elu

    positions = _positions(mask, start)
    fq, fk = phi(q), phi(k)
    rq, rk = rotate_reference(fq, positions), rotate_reference(fk, positions)
    seen = np.tril(np.ones((13, 13)))[None, None] * mask[:, None, None, :]  # [B, 1, i, j]
    num = np.einsum("bhij,bjhd->bihd", np.einsum("bihf,bjhf->bhij", rq, rk) * seen, v)
    if name == "linear":
        den = np.einsum("bihf,bjhf->bhij", fq, fk) * seen
        want = num / np.transpose(den.sum(-1), (0, 2, 1))[..., None]
    else:
        want = num / np.sqrt(np.mean(num**2, axis=(2, 3), keepdims=True) + 1e-6)
    np.testing.assert_allclose(to_np(got), want, rtol=1e-4, atol=1e-4)


def test_rotary_is_refused_where_it_is_not_defined_and_kept_out_of_relative():
    for name in ("fastformer", "primal"):
        with pytest.raises(ValueError, match="rotary positions are not defined for"):
            create_attention(name, WIDTH, HEADS, rotary=True)
    relative = create_attention("relative", WIDTH, HEADS, rotary=True, mem_len=4)
    assert not relative.rotary and "position" not in relative.state_spec(1)


def test_rotary_round_trips_through_the_config():
    layer = make("linear")
    clone = type(layer).from_config(layer.get_config())
    assert clone.rotary and "position" in clone.state_spec(1)
    x, mask = random_tokens(1, 9, WIDTH, seed=8)
    clone.build((None, None, WIDTH))
    clone.set_weights(layer.get_weights())
    cuts = (0, 4, 9)
    np.testing.assert_allclose(
        run_segments(clone, x, mask, cuts)[0], run_segments(layer, x, mask, cuts)[0], rtol=1e-6
    )
