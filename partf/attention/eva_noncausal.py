"""EVA's non-causal form, as the authors' encoder (`EVAAttention` with causal=False).

A query attends exactly to the real tokens of its own window and, through one summary
each, to every chunk of the sequence outside that window; all logits share one
softmax. There is no state: one whole sequence per call.
"""

from __future__ import annotations

import math
from typing import Any

from keras import ops

from partf.attention.masking import masked_softmax, valid_tokens
from partf.attention.windowed import split_blocks


def noncausal_eva(
    layer: Any, q: Any, k: Any, v: Any, mask: Any = None, training: bool | None = None
) -> Any:
    """Non-causal EVA of `layer`, an `EVAAttention` (its window and chunk sizes,
    `summarize` and dropout): per-head q, k, v [B, T, H, Dh] -> [B, T, H, Dh] in q's dtype."""
    window, chunk = layer.window_size, layer.chunk_size
    heads, dim = layer.num_heads, layer.head_dim
    dtype = q.dtype
    q, k, v = (ops.cast(t, "float32") for t in (q, k, v))
    batch, length = ops.shape(q)[0], ops.shape(q)[1]
    valid = valid_tokens(mask, batch, length, "float32")
    # [B, n, W, ...], the sequence padded to whole windows (padding is not valid).
    q_win, k_win, v_win = (split_blocks(t, window) for t in (q, k, v))
    valid_win = split_blocks(valid, window)  # [B, n, W]
    num_windows = ops.shape(q_win)[1]

    def chunks(x):  # [B, n, W, ...] -> [B, n W / C, C, ...]
        return ops.reshape(x, (batch, -1, chunk) + tuple(ops.shape(x)[3:]))

    keys, values, ok = layer.summarize(
        chunks(q_win), chunks(k_win), chunks(v_win), chunks(valid_win), training
    )  # [B, m, H, Dh], [B, m, H, Dh], [B, m]
    scale = 1.0 / math.sqrt(dim)
    logits = ops.einsum("bnihd,bnjhd->bnhij", q_win, k_win) * scale  # [B, n, H, W, W]
    chunk_logits = ops.einsum("bnihd,bmhd->bnhim", q_win, keys) * scale  # [..., m]
    # Chunk c lies in window c // (W / C): the exact part covers it there.
    chunk_window = ops.arange(ops.shape(keys)[1]) // (window // chunk)  # [m]
    outside = chunk_window[None, :] != ops.arange(num_windows)[:, None]  # [n, m]
    visible = ops.concatenate(
        [
            valid_win[:, :, None, None, :] > 0.5,
            ops.logical_and(outside[None, :, None, None, :], ok[:, None, None, None, :]),
        ],
        axis=-1,
    )  # [B, n, 1, 1, W + m]
    logits = ops.concatenate([logits, chunk_logits], axis=-1)
    probs = layer.dropout(masked_softmax(logits, visible), training=training)
    # A pad's value gets weight 0, but 0 * inf would still be NaN.
    v_win = ops.where(valid_win[..., None, None] > 0.5, v_win, 0.0)
    out = ops.einsum("bnhij,bnjhd->bnihd", probs[..., :window], v_win)
    out = out + ops.einsum("bnhim,bmhd->bnihd", probs[..., window:], values)
    out = ops.reshape(out, (batch, -1, heads, dim))[:, :length]
    return ops.cast(out, dtype)
