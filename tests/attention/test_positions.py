"""Positions for attention (partf/attention/positions.py): the rotary rotation against an
explicit 2x2 rotation in float64, stream positions that count real tokens only, and the
sinusoid against its definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention
from partf.attention.positions import apply_rotary, sinusoid, stream_positions
from tests.attention.helpers import random_heads, to_np
from tests.attention.references import rotate_reference


def test_apply_rotary_equals_the_explicit_rotation():
    (x,) = random_heads(2, 5, 3, 8)[:1]
    positions = np.array([[0, 1, 2, 7, 40], [3, 3, 9, 1000, 12345]])
    np.testing.assert_allclose(
        to_np(apply_rotary(x, positions)), rotate_reference(x, positions), rtol=1e-5, atol=1e-5
    )


def test_apply_rotary_stays_accurate_far_into_a_stream():
    """At positions near 10^5 a float32 product p * theta is off by up to 0.008 radians
    (1.8e-3 on these outputs); the split form keeps them within 3e-4 of float64."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 6, 1, 16)).astype("float32")
    positions = np.array([[65535, 70001, 98765, 123457, 200003, 99999]])
    np.testing.assert_allclose(
        to_np(apply_rotary(x, positions)), rotate_reference(x, positions), atol=3e-4
    )


def test_rotated_dot_products_depend_on_the_distance_only():
    q, k, _ = random_heads(1, 6, 2, 8)
    base = np.arange(6)[None]
    scores = []
    for shift in (0, 17, 5000):
        rq, rk = apply_rotary(q, base + shift), apply_rotary(k, base + shift)
        scores.append(to_np(ops.einsum("bihd,bjhd->bhij", rq, rk)))
    np.testing.assert_allclose(scores[1], scores[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scores[2], scores[0], rtol=1e-3, atol=1e-3)
    plain = to_np(ops.einsum("bihd,bjhd->bhij", q, k))
    assert not np.allclose(scores[0], plain, atol=1e-2)  # positions do change the scores


def test_odd_widths_are_refused():
    with pytest.raises(ValueError, match="head width must be even"):
        apply_rotary(np.ones((1, 2, 1, 5), "float32"), np.zeros((1, 2), "int32"))
    with pytest.raises(ValueError, match="head_dim must be even"):
        create_attention("softmax", 10, 2, rotary=True)


def test_stream_positions_count_real_tokens_only():
    valid = np.array([[1, 1, 0, 1], [0, 0, 1, 1]], bool)
    positions, after = stream_positions(np.array([0, 5]), valid)
    assert to_np(positions).tolist() == [[0, 1, 2, 2], [5, 5, 5, 6]]
    assert to_np(after).tolist() == [3, 7]


def test_sinusoid_matches_its_definition():
    positions = np.array([[0, 1, 50, 77777]])
    dim = 6
    got = to_np(sinusoid(positions, dim))
    want = np.zeros((1, 4, dim))
    for t, p in enumerate(positions[0]):
        for k in range(dim // 2):
            angle = p / 10000.0 ** (2.0 * k / dim)
            want[0, t, k], want[0, t, dim // 2 + k] = math.sin(angle), math.cos(angle)
    np.testing.assert_allclose(got, want, atol=1e-3)
