"""Token positions: where each token sits in its stream, sinusoids, rotary embeddings
(docs/positions.md).

A token's absolute position is the number of real tokens before it in its stream, so
whoever adds positions carries that count (`offset`, int32 [B]) from one segment to the
next, and padding takes no position. `sinusoid` gives Vaswani et al.'s fixed sinusoids
(added to the embeddings); `apply_rotary` rotates feature pairs (x_k, x_{k + D/2}) of a
query or key at position p by p * theta_k, theta_k = 10000^(-2k/D) (RoPE, Su et al.
2021), so a query meets a key through p_q - p_k only.

Angles are computed from positions split as p = 1024 a + b, with (1024 theta_k) mod 2 pi
taken in float64 once: p * theta_k in float32 loses about 0.008 radians at p = 10^5,
the split form about 10^-4.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from keras import ops

#: theta_k = ROTARY_BASE^(-2k / D), as RoFormer and the sinusoids of Vaswani et al.
ROTARY_BASE = 10000.0
#: Positions are split as p = SPLIT * a + b for accurate angles (see the module docstring).
SPLIT = 1024


def stream_positions(offset: Any, valid: Any) -> tuple[Any, Any]:
    """(positions int32 [B, T], new offset int32 [B]) of a segment's tokens: `offset` [B]
    (real tokens of the stream before the segment) plus the real tokens (`valid` [B, T])
    before each token; a pad gets the position the next real token will take.

    Example:
        >>> p, n = stream_positions(ops.array([3]), ops.array([[1, 0, 1, 1]]))
        >>> ops.convert_to_numpy(p).tolist(), ops.convert_to_numpy(n).tolist()
        ([[3, 4, 4, 5]], [6])"""
    valid = ops.cast(valid, "int32")
    offset = ops.cast(offset, "int32")
    before = ops.cumsum(valid, axis=1) - valid
    return offset[:, None] + before, offset + ops.sum(valid, axis=1)


def _frequencies(num: int, dim: int) -> np.ndarray:
    """theta_k = ROTARY_BASE^(-2k / dim), k < num, float64."""
    return ROTARY_BASE ** (-np.arange(0, 2 * num, 2, dtype=np.float64) / dim)


def position_angles(positions: Any, frequencies: np.ndarray) -> Any:
    """float32 [..., F]: positions [...] times each frequency, accurate for large positions.

    p * theta is computed as a * ((SPLIT * theta) mod 2 pi) + b * theta with
    p = SPLIT * a + b, the reduced factor taken in float64 (see the module docstring).
    """
    positions = ops.cast(positions, "int32")
    high = ops.cast(positions // SPLIT, "float32")[..., None]
    low = ops.cast(positions % SPLIT, "float32")[..., None]
    reduced = ops.convert_to_tensor(np.mod(SPLIT * frequencies, 2.0 * math.pi).astype(np.float32))
    return high * reduced + low * ops.convert_to_tensor(frequencies.astype(np.float32))


def sinusoid(positions: Any, dim: int, dtype: str = "float32") -> Any:
    """Fixed sinusoidal encodings [..., dim] of positions int [...] >= 0: sin(p theta_k) in
    the first half, cos(p theta_k) in the second (an odd dim drops the last cosine), the
    layout of `partf.attention.relative.sinusoidal_encoding`."""
    half = (dim + 1) // 2
    angles = position_angles(positions, _frequencies(half, dim))
    encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
    return ops.cast(encoding[..., :dim], dtype)


def apply_rotary(x: Any, positions: Any) -> Any:
    """Rotary position embedding of x [B, T, H, D] (D even, else ValueError) at int [B, T]
    absolute positions: feature pair (x_k, x_{k+D/2}) rotated by p theta_k, computed in
    float32, returned in x's dtype."""
    dim = x.shape[-1]
    if dim is None or dim % 2:
        raise ValueError(
            f"rotary positions rotate pairs of features, so the head width must be even, "
            f"got {dim}; choose num_heads so that d_model / num_heads is even."
        )
    half = dim // 2
    angles = position_angles(positions, _frequencies(half, dim))[:, :, None, :]  # [B, T, 1, D/2]
    cos, sin = ops.cos(angles), ops.sin(angles)
    values = ops.cast(x, "float32")
    first, second = values[..., :half], values[..., half:]
    rotated = ops.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)
    return ops.cast(rotated, x.dtype)
