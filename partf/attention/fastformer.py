"""Fastformer additive attention in causal form (Wu et al., 2021; causal form after mtanghu).

Fastformer pools the queries into one global query with softmax weights
alpha_i ~ exp(w_q . q_i / sqrt(Dh)), mixes it into every key (p_i = g_q * k_i), pools
those into a global key the same way, and mixes that into every value (u_i = g_k * v_i);
the output is a linear transform of u plus the query. Causally every position pools its
past only, which is causal linear attention with one constant feature and key log-scales
a_i: two running-sum states (query and key pooling), computed by the shared chunk-wise
kernel without overflow, carry the context exactly.

Additive attention sees only global summaries, so the seed adds a causal grouped
convolution for local context (`convolve`) as a residual branch: `conv_form="seed"` is
the seed's `CausalConvolution` (mtanghu/Additive-Attention-Is-All-You-Need, eeadc53: a
layer norm, then the convolution without bias), "partf" a convolution with bias, then
GELU. With no query-key products, rotary positions are not defined here.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from partf.attention.base import Attention, State, check_choice
from partf.attention.bidirectional import noncausal_linear_attention
from partf.attention.chunked import CHUNK_SIZE_HELP, causal_linear_attention, linear_state_spec
from partf.attention.masking import valid_tokens
from partf.attention.registry import register_attention

#: What `convolve` adds: the seed's layer norm and bias-free convolution ("seed"), or
#: partf's first convolution with bias and GELU ("partf").
CONV_FORMS = ("seed", "partf")


def causal_convolution(x: Any, tail: Any, kernel: Any, bias: Any | None = None) -> tuple[Any, Any]:
    """A grouped 1-D convolution over time that sees no future input:
    y_t = sum_{i < K} x_{t - K + 1 + i} W_i (+ bias), `kernel` [K, G, D / G, D / G] (tap
    K - 1 the current position), the K - 1 inputs before the segment from `tail`
    [B, K - 1, D]. Returns (y [B, T, D] in x's dtype, the new tail in tail's dtype)."""
    taps, groups, width = kernel.shape[0], kernel.shape[1], kernel.shape[2]
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    full = ops.concatenate([ops.cast(tail, x.dtype), x], axis=1)  # [B, K - 1 + T, D]
    grouped = ops.reshape(full, (batch, -1, groups, width))
    kernel = ops.cast(kernel, x.dtype)
    y = 0
    for i in range(taps):  # K is small (4 in the seed): one product per tap
        y = y + ops.einsum("btgi,gio->btgo", grouped[:, i : i + length], kernel[i])
    y = ops.reshape(y, (batch, length, groups * width))
    if bias is not None:
        y = y + ops.cast(bias, x.dtype)
    new_tail = full[:, ops.shape(full)[1] - (taps - 1) :] if taps > 1 else tail
    return y, ops.cast(new_tail, tail.dtype)


# position: none (no rotary; sinusoidal and learned cost 9 to 32%, benchmarks/positions.py).
@register_attention("fastformer", position="none")
class FastformerAttention(Attention):
    """Causal Fastformer (additive attention) with running sums as state.

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        chunk_size: tokens per chunk of the chunk-wise computation.
        convolve: a causal convolution before the additive attention; the layer
            returns conv + attention(input + conv).
        conv_form: "seed" or "partf" (module docstring).
        groups: channel groups of the convolution (must divide d_model).
        kernel_size: taps of the convolution (the current input and those before).

    State: `q_s` [B, H, 1, Dh], `q_z` [B, H, 1], `q_m` [B, H] for the global query, `k_*`
    alike for the global key, float32, and with a convolution `conv_tail`
    [B, kernel_size - 1, D]. Exact. With `causal=False` (as published) the global query
    and key pool the whole sequence and there is no state; the convolution stays causal."""

    option_help = {
        "chunk_size": CHUNK_SIZE_HELP,
        "convolve": "fastformer: a causal convolution before the additive attention",
        "groups": "fastformer: channel groups of the convolution",
        "kernel_size": "fastformer: taps of the causal convolution",
        "conv_form": "fastformer: the convolution, seed (layer norm, then no bias) or partf "
        "(bias, then GELU)",
    }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        chunk_size: int = 64,
        convolve: bool = False,
        groups: int = 2,
        kernel_size: int = 4,
        conv_form: str = "seed",
        **kwargs: Any,
    ):
        super().__init__(d_model, num_heads, **kwargs)
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}.")
        if convolve and not self.causal:
            raise ValueError(
                "Fastformer's convolution is causal (the seed's language-model form); "
                "use convolve=False with causal=False."
            )
        if kernel_size <= 0:
            raise ValueError(f"kernel_size must be positive, got {kernel_size}.")
        if groups <= 0 or d_model % groups:
            raise ValueError(
                f"groups={groups} must be positive and divide d_model={d_model}; e.g. groups=2."
            )
        check_choice("conv_form", conv_form, CONV_FORMS)
        self.chunk_size = chunk_size
        self.conv_form = conv_form
        self.convolve = bool(convolve)
        self.groups = groups
        self.kernel_size = kernel_size

    def build(self, input_shape) -> None:
        super().build(input_shape)
        init = keras.initializers.RandomNormal(stddev=0.02)
        shape = (self.num_heads, self.head_dim)
        self.query_pool = self.add_weight(name="query_pool", shape=shape, initializer=init)
        self.key_pool = self.add_weight(name="key_pool", shape=shape, initializer=init)
        # r_i = W u_i, a full linear map over all heads, before adding the query.
        bias = "gj" if self.use_bias else None
        self.transform = self._projection(
            "transform", "bthk,hkgj->btgj", (None, *shape), (None, None, *shape), bias
        )
        if self.convolve:
            width = self.d_model // self.groups
            self.conv_kernel = self.add_weight(
                name="conv_kernel",
                shape=(self.kernel_size, self.groups, width, width),
                initializer=keras.initializers.GlorotUniform(),
            )
            if self.conv_form == "seed":
                # torch's LayerNorm epsilon, which the seed's code uses.
                self.conv_norm = keras.layers.LayerNormalization(
                    epsilon=1e-5, dtype=self.dtype_policy, name="conv_norm"
                )
                self.conv_norm.build((None, None, self.d_model))
            else:
                self.conv_bias = self.add_weight(
                    name="conv_bias", shape=(self.d_model,), initializer="zeros"
                )

    @property
    def conv_tail_length(self) -> int:
        """Inputs the convolution carries across segments (0 without it)."""
        return self.kernel_size - 1 if self.convolve else 0

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        if not self.causal:  # one whole sequence per call: nothing to carry
            return {}
        spec = {}
        for prefix in ("q_", "k_"):
            spec.update(
                linear_state_spec(
                    batch_size, self.num_heads, 1, self.head_dim, log_scale=True, prefix=prefix
                )
            )
        if self.conv_tail_length:
            spec["conv_tail"] = ((batch_size, self.conv_tail_length, self.d_model), "float32")
        return spec

    def call(self, x, state=None, mask=None, training=None) -> tuple[Any, State]:
        if not self.convolve:
            return super().call(x, state=state, mask=mask, training=training)
        x = ops.cast(x, self.compute_dtype)
        if state is None:
            state = self.get_initial_state(ops.shape(x)[0])
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        # Padding contributes nothing to later positions' convolutions.
        valid = valid_tokens(mask, batch, length, x.dtype)[:, :, None]
        tail = state["conv_tail"] if self.conv_tail_length else ops.zeros((batch, 0, self.d_model))
        if self.conv_form == "seed":
            # The seed pads the normed stream with zeros: pads read as zeros too.
            conv, new_tail = causal_convolution(self.conv_norm(x) * valid, tail, self.conv_kernel)
            local = self.dropout(conv, training=training)
        else:
            conv, new_tail = causal_convolution(x * valid, tail, self.conv_kernel, self.conv_bias)
            local = self.dropout(ops.gelu(conv, approximate=False), training=training)
        attention_state = {name: value for name, value in state.items() if name != "conv_tail"}
        y, new_state = super().call(x + local, state=attention_state, mask=mask, training=training)
        if self.conv_tail_length:
            new_state = {**new_state, "conv_tail": new_tail}
        # The block adds x: x + y = (x + local) + attention(x + local).
        return y + local, new_state

    def attend(self, q, k, v, state, mask=None, training=None) -> tuple[Any, State]:
        scale = 1.0 / math.sqrt(self.head_dim)
        q32 = ops.cast(q, "float32")
        query_logits = ops.einsum("bthd,hd->bth", q32, ops.cast(self.query_pool, "float32"))
        global_q, q_state = self.additive_pool(q32, query_logits * scale, state, "q_", mask)
        mixed = global_q * ops.cast(k, "float32")  # p_i = g_q,i * k_i
        key_logits = ops.einsum("bthd,hd->bth", mixed, ops.cast(self.key_pool, "float32"))
        global_k, k_state = self.additive_pool(mixed, key_logits * scale, state, "k_", mask)
        weighted = ops.cast(global_k * ops.cast(v, "float32"), q.dtype)  # u_i = g_k,i * v_i
        out = self.transform(weighted) + q
        return out, {**q_state, **k_state}

    def additive_pool(self, x, logits, state, prefix, mask) -> tuple[Any, State]:
        """g_i = sum_{j<=i} exp(a_j) x_j / sum_{j<=i} exp(a_j) of x [B, T, H, Dh] and logits
        a [B, T, H], carried in `state` (`{prefix}s`, `{prefix}z`, `{prefix}m`): (g float32,
        new state entries). Without the causal mask, Fastformer's own global vector: one
        softmax-weighted sum over every real token (no state)."""
        ones = ops.ones(ops.shape(logits) + (1,), dtype="float32")
        if self.causal:
            chunks = {"chunk_size": self.chunk_size, "prefix": prefix}
            return causal_linear_attention(
                ones, ones, x, state, k_log_scale=logits, mask=mask, **chunks
            )
        return noncausal_linear_attention(ones, ones, x, k_log_scale=logits, mask=mask), {}

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Two additive poolings (one feature each, chunk-wise like linear attention;
        # non-causally one weighted sum over the sequence and its normaliser), their
        # pooling logits, and the transform W u, a D x D map.
        chunk = min(self.chunk_size, seq_len)
        width = self.num_heads * self.head_dim
        if self.causal:
            pool = 2.0 * chunk * (1 + self.head_dim) + 4.0 * self.head_dim
        else:
            pool = 4.0 * self.head_dim + 2.0
        pooling = 2 * pool * self.num_heads
        flops = pooling + 2 * 2.0 * width + 2.0 * width * width
        if self.convolve:  # kernel_size taps, each a (D / G) x (D / G) product per group
            flops += 2.0 * self.kernel_size * self.d_model * self.d_model / self.groups
        return flops
