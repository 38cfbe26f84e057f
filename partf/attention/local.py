"""Sliding-window (local) softmax attention.

Each query attends to itself and the `window_size` tokens before it, across
segment boundaries: the state is the last `window_size` keys and values. The
segment is processed in blocks of `window_size` queries, each looking at a
window of 2 * `window_size` keys, so the cost is O(T * window_size).
"""

from __future__ import annotations

import math
from typing import Any

from keras import ops

from partf.attention.base import Attention, State
from partf.attention.masking import masked_softmax, valid_tokens
from partf.attention.registry import register_attention
from partf.attention.windowed import (
    WINDOW_SIZE_HELP,
    sliding_windows,
    split_blocks,
)


@register_attention("local", position="rotary")
class LocalAttention(Attention):
    """Causal sliding-window softmax attention with the last window as state; with
    `causal=False`, query i sees the real tokens within W of it on both sides, and there is
    no state (but the rotary position).

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        window_size: W, the number of previous tokens each query sees besides itself.

    State: `win_k`, `win_v` [B, W, H, Dh] and `win_valid` [B, W], the last W tokens,
    float32 (keys rotated, and `position` [B] int32, with `rotary`); exact: segments equal
    one call.

    Reference: Beltagy et al., "Longformer", 2020; the causal local baseline of Zheng et
    al., EVA, ICLR 2023.
    """

    supports_rotary = True
    option_help = {
        "window_size": WINDOW_SIZE_HELP,
    }

    def __init__(self, d_model: int, num_heads: int, window_size: int = 128, **kwargs: Any):
        super().__init__(d_model, num_heads, **kwargs)
        if window_size <= 0:
            raise ValueError(f"window_size must be positive, got {window_size}.")
        self.window_size = window_size

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        if not self.causal:  # one whole sequence per call: nothing to carry
            return self.position_state_spec(batch_size)
        kv = ((batch_size, self.window_size, self.num_heads, self.head_dim), "float32")
        spec = {"win_k": kv, "win_v": kv, "win_valid": ((batch_size, self.window_size), "float32")}
        return {**spec, **self.position_state_spec(batch_size)}

    def attend(self, q, k, v, state, mask=None, training=None) -> tuple[Any, State]:
        if not self.causal:
            return self.attend_both_sides(q, k, v, mask, training), {}
        window = self.window_size
        batch, length = ops.shape(q)[0], ops.shape(q)[1]
        valid = ops.cast(valid_tokens(mask, batch, length), "float32")
        k, v = ops.cast(k, "float32"), ops.cast(v, "float32")
        q_blocks = split_blocks(ops.cast(q, "float32"), window)  # [B, n, W, H, Dh]
        k_win = sliding_windows(k, state["win_k"], window)  # [B, n, 2W, H, Dh]
        v_win = sliding_windows(v, state["win_v"], window)
        valid_win = sliding_windows(valid, state["win_valid"], window)  # [B, n, 2W]

        logits = ops.einsum("bnihd,bnjhd->bnhij", q_blocks, k_win) / math.sqrt(self.head_dim)
        # Query i and key j of its window are W + i - j tokens apart.
        distance = window + ops.arange(window)[:, None] - ops.arange(2 * window)[None, :]
        band = ops.logical_and(distance >= 0, distance <= window)
        visible = ops.logical_and(band[None, None, None], valid_win[:, :, None, None, :] > 0.5)
        probs = self.dropout(masked_softmax(logits, visible), training=training)
        out = ops.einsum("bnhij,bnjhd->bnihd", probs, v_win)
        out = ops.reshape(out, (batch, -1, self.num_heads, self.head_dim))[:, :length]

        new_state = {
            "win_k": ops.concatenate([state["win_k"], k], axis=1)[:, -window:],
            "win_v": ops.concatenate([state["win_v"], v], axis=1)[:, -window:],
            "win_valid": ops.concatenate([state["win_valid"], valid], axis=1)[:, -window:],
        }
        return ops.cast(out, q.dtype), new_state

    def attend_both_sides(self, q, k, v, mask=None, training=None) -> Any:
        """Non-causal form: query i sees the real keys j with |i - j| <= W.

        Blocks of W queries each score their own block of keys and the blocks on
        either side, 3W keys; the band and the padding mask pick the visible ones.
        """
        window = self.window_size
        batch, length = ops.shape(q)[0], ops.shape(q)[1]
        valid = ops.cast(valid_tokens(mask, batch, length), "float32")

        def neighbourhoods(x):  # [B, T, ...] -> [B, n, 3W, ...]: blocks b - 1, b, b + 1
            blocks = split_blocks(x, window)
            empty = ops.zeros_like(blocks[:, :1])
            before = ops.concatenate([empty, blocks[:, :-1]], axis=1)
            after = ops.concatenate([blocks[:, 1:], empty], axis=1)
            return ops.concatenate([before, blocks, after], axis=2)

        q_blocks = split_blocks(ops.cast(q, "float32"), window)  # [B, n, W, H, Dh]
        k_win = neighbourhoods(ops.cast(k, "float32"))  # [B, n, 3W, H, Dh]
        v_win = neighbourhoods(ops.cast(v, "float32"))
        valid_win = neighbourhoods(valid)  # [B, n, 3W]; padding added here is 0
        logits = ops.einsum("bnihd,bnjhd->bnhij", q_blocks, k_win) / math.sqrt(self.head_dim)
        # Key j of the neighbourhood sits j - W - i tokens after query i.
        offset = ops.arange(3 * window)[None, :] - window - ops.arange(window)[:, None]
        band = ops.abs(offset) <= window
        visible = ops.logical_and(band[None, None, None], valid_win[:, :, None, None, :] > 0.5)
        probs = self.dropout(masked_softmax(logits, visible), training=training)
        # A pad's value gets weight 0, but 0 * inf would still be NaN.
        v_win = ops.where(valid_win[..., None, None] > 0.5, v_win, 0.0)
        out = ops.einsum("bnhij,bnjhd->bnihd", probs, v_win)
        out = ops.reshape(out, (batch, -1, self.num_heads, self.head_dim))[:, :length]
        return ops.cast(out, q.dtype)

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Blocks of W queries (the segment padded to whole blocks) each score 2W keys:
        # their own block and the one before; non-causally 3W, the one after too.
        window = self.window_size
        padded = -(-seq_len // window) * window
        keys = (2 if self.causal else 3) * window
        return 4.0 * keys * self.num_heads * self.head_dim * padded / seq_len
