"""Plain softmax attention with a Transformer-XL style key/value memory: the baseline.

Scaled dot-product attention (Vaswani et al., 2017) without any positional
bias. The state is the keys and values of the last `mem_len` tokens, so a
segment also attends to the end of the previous one, as in Transformer-XL
(Dai et al., 2019); the cost is quadratic in the segment length.
"""

from __future__ import annotations

import math
from typing import Any

from keras import ops

from partf.attention.base import Attention, State
from partf.attention.masking import masked_softmax, valid_tokens
from partf.attention.registry import register_attention


@register_attention("softmax", position="rotary")
class SoftmaxAttention(Attention):
    """Causal softmax attention over a key/value memory and the segment.

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        mem_len: keys and values of this many previous tokens are kept in the
            state and attended to (0: no memory, stateless).

    State: `mem_k`, `mem_v` [B, mem_len, H, Dh] and `mem_valid` [B, mem_len]
    (1 where a slot holds a real token), float32; with `rotary`, the keys are kept
    rotated and `position` [B] int32 counts the tokens read.

    Reference: Vaswani et al., "Attention Is All You Need", NeurIPS 2017;
    Dai et al., "Transformer-XL", ACL 2019 (the memory).
    """

    supports_rotary = True
    option_help = {
        "mem_len": "previous tokens whose keys and values are kept as memory (0: none)",
    }

    def __init__(self, d_model: int, num_heads: int, mem_len: int = 0, **kwargs: Any) -> None:
        super().__init__(d_model, num_heads, **kwargs)
        if mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {mem_len}.")
        self.mem_len = mem_len

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        spec = self.position_state_spec(batch_size)
        if self.mem_len:
            kv = ((batch_size, self.mem_len, self.num_heads, self.head_dim), "float32")
            spec.update(mem_k=kv, mem_v=kv, mem_valid=((batch_size, self.mem_len), "float32"))
        return spec

    def attend(self, q, k, v, state, mask=None, training=None) -> tuple[Any, State]:
        batch, length = ops.shape(q)[0], ops.shape(q)[1]
        valid = valid_tokens(mask, batch, length)
        keys, values = ops.cast(k, "float32"), ops.cast(v, "float32")
        if self.mem_len:
            keys = ops.concatenate([state["mem_k"], keys], axis=1)  # [B, M+T, H, Dh]
            values = ops.concatenate([state["mem_v"], values], axis=1)
            valid = ops.concatenate([state["mem_valid"] > 0.5, valid], axis=1)
        logits = ops.einsum("bihd,bjhd->bhij", ops.cast(q, "float32"), keys)
        logits = logits / math.sqrt(self.head_dim)
        visible = valid[:, None, None, :]
        if self.causal:
            # Query t sees the whole memory and segment keys up to t.
            query_pos = ops.arange(length)[:, None] + self.mem_len
            key_pos = ops.arange(ops.shape(keys)[1])[None, :]
            visible = ops.logical_and(visible, (key_pos <= query_pos)[None, None])
        probs = self.dropout(masked_softmax(logits, visible), training=training)
        out = ops.einsum("bhij,bjhd->bihd", probs, values)
        new_state = {}
        if self.mem_len:
            new_state = {
                "mem_k": keys[:, -self.mem_len :],
                "mem_v": values[:, -self.mem_len :],
                "mem_valid": ops.cast(valid[:, -self.mem_len :], "float32"),
            }
        return ops.cast(out, q.dtype), new_state

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Scores and weighted values over the cached memory plus the segment.
        return 4.0 * (seq_len + self.mem_len) * self.num_heads * self.head_dim
