"""Fastformer additive attention in causal form (Wu et al., 2021; causal form after mtanghu).

Fastformer pools the queries into one global query with softmax weights
alpha_i ~ exp(w_q . q_i / sqrt(Dh)), mixes it into every key (p_i = g_q * k_i),
pools those into a global key the same way, and mixes that into every value:
u_i = g_k * v_i. The output is a linear transform of u plus the query.

For a language model every position needs its own global vectors built from
its past only. Factoring out the softmax denominator (the causal derivation,
equations 5 to 8 of the seed) gives running sums

    s_i = s_{i-1} + exp(a_i) x_i,    z_i = z_{i-1} + exp(a_i),    g_i = s_i / z_i,

which is causal linear attention with one constant feature and key
log-scales a_i: the shared chunk-wise kernel computes it, relative to the
running maximum of a so that exp never overflows. Two such states (query
pooling and key pooling) carry the context to the next segment, exactly.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from partf.attention.base import Attention, Projection, State
from partf.attention.chunked import CHUNK_SIZE_HELP, causal_linear_attention, linear_state_spec
from partf.attention.registry import register_attention


def causal_additive_pool(
    x: Any,
    logits: Any,
    state: State,
    prefix: str,
    mask: Any | None = None,
    chunk_size: int = 64,
) -> tuple[Any, State]:
    """g_i = sum_{j<=i} exp(a_j) x_j / sum_{j<=i} exp(a_j), carried in `state`.

    Args:
        x: [B, T, H, Dh] vectors to pool.
        logits: [B, T, H] pooling logits a.
        state: holds `{prefix}s` [B, H, 1, Dh], `{prefix}z` [B, H, 1], `{prefix}m` [B, H].

    Returns:
        (g [B, T, H, Dh] float32, new state entries).
    """
    ones = ops.ones(ops.shape(logits) + (1,), dtype="float32")
    return causal_linear_attention(
        ones, ones, x, state, k_log_scale=logits, mask=mask, chunk_size=chunk_size, prefix=prefix
    )


@register_attention("fastformer")
class FastformerAttention(Attention):
    """Causal Fastformer (additive attention) with running sums as state.

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        chunk_size: tokens per chunk of the chunk-wise computation.

    State: `q_s` [B, H, 1, Dh], `q_z` [B, H, 1], `q_m` [B, H] for the global
    query, and `k_*` alike for the global key, float32. Exact.

    Example:
        >>> layer = FastformerAttention(d_model=32, num_heads=4)
        >>> y, state = layer(x)

    Reference: Wu et al., "Fastformer: Additive Attention Can Be All You
    Need", 2021; causal form from mtanghu, "Additive Attention Is All You Need?".
    """

    option_help = {
        "chunk_size": CHUNK_SIZE_HELP,
    }

    def __init__(self, d_model: int, num_heads: int, chunk_size: int = 64, **kwargs: Any):
        super().__init__(d_model, num_heads, **kwargs)
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}.")
        if not self.causal:
            raise ValueError("FastformerAttention is causal only; use causal=True.")
        self.chunk_size = chunk_size

    def build(self, input_shape) -> None:
        super().build(input_shape)
        init = keras.initializers.RandomNormal(stddev=0.02)
        shape = (self.num_heads, self.head_dim)
        self.query_pool = self.add_weight(name="query_pool", shape=shape, initializer=init)
        self.key_pool = self.add_weight(name="key_pool", shape=shape, initializer=init)
        # r_i = W u_i, a full linear map over all heads, before adding the query.
        self.transform = Projection(
            "bthk,hkgj->btgj",
            output_shape=(None, self.num_heads, self.head_dim),
            bias_axes="gj" if self.use_bias else None,
            dtype=self.dtype_policy,
            name="transform",
        )
        self.transform.build((None, None, self.num_heads, self.head_dim))

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        spec = {}
        for prefix in ("q_", "k_"):
            spec.update(
                linear_state_spec(
                    batch_size, self.num_heads, 1, self.head_dim, log_scale=True, prefix=prefix
                )
            )
        return spec

    def attend(self, q, k, v, state, mask=None, training=None) -> tuple[Any, State]:
        scale = 1.0 / math.sqrt(self.head_dim)
        q32 = ops.cast(q, "float32")
        query_logits = ops.einsum("bthd,hd->bth", q32, ops.cast(self.query_pool, "float32"))
        global_q, q_state = causal_additive_pool(
            q32, query_logits * scale, state, "q_", mask, self.chunk_size
        )
        mixed = global_q * ops.cast(k, "float32")  # p_i = g_q,i * k_i
        key_logits = ops.einsum("bthd,hd->bth", mixed, ops.cast(self.key_pool, "float32"))
        global_k, k_state = causal_additive_pool(
            mixed, key_logits * scale, state, "k_", mask, self.chunk_size
        )
        weighted = ops.cast(global_k * ops.cast(v, "float32"), q.dtype)  # u_i = g_k,i * v_i
        out = self.transform(weighted) + q
        return out, {**q_state, **k_state}

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Two additive poolings (one feature each, chunk-wise like linear attention),
        # their pooling logits, and the transform W u, a D x D map.
        chunk = min(self.chunk_size, seq_len)
        width = self.num_heads * self.head_dim
        pooling = 2 * (2.0 * chunk * (1 + self.head_dim) + 4.0 * self.head_dim) * self.num_heads
        return pooling + 2 * 2.0 * width + 2.0 * width * width

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(chunk_size=self.chunk_size)
        return config
