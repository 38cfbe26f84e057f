"""TransNormer's two attentions: NormAttention and DiagAttention (Qin et al., 2022).

The paper finds that kernel linear attention's denominator makes gradients unbounded,
and that over long sequences it spreads attention too thinly. Its answer:

* NormAttention: linear attention without the denominator, phi(Q)(phi(K)^T V), then a
  normalisation of the output; the running sum S = sum phi(k) v^T is the state.
* DiagAttention: attention within blocks of `window_size` tokens at fixed stream
  positions (counted in real tokens), normalised as well; the open block is the state.

The paper puts DiagAttention in the early layers. The defaults are the authors' released
`transnormer_t1` (elu features, relu block scores, the simple RMS norm x / (rms(x) +
1e-8) over all heads); `transnormer_t2` is `feature_map="elu+1"`,
`diag_activation="softmax"`, `norm_type="none"`. Neither applies the released models'
URPE. `rms_form="partf"` (x / sqrt(mean(x^2) + 1e-6)) is partf's own.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from partf.attention.base import Attention, State, check_choice
from partf.attention.chunked import CHUNK_SIZE_HELP
from partf.attention.linear import FeatureMapAttention
from partf.attention.masking import masked_softmax, valid_tokens
from partf.attention.registry import register_attention
from partf.attention.windowed import (
    WINDOW_SIZE_HELP,
    from_grid,
    grid_buffer,
    grid_valid,
    next_offset,
    real_token_layout,
    split_blocks,
    to_grid,
)

NORM_TYPES = ("simple_rms", "layer", "none")
RMS_FORMS = ("authors", "partf")
AUTHORS_RMS_EPSILON = 1e-8
PARTF_RMS_EPSILON = 1e-6
RMS_FORM_HELP = (
    "norm/diag: simple_rms form, authors (x / (rms + 1e-8), TransNormer's code) or partf "
    "(x / sqrt(mean square + 1e-6))"
)
FEATURE_MAPS = ("elu", "elu+1", "relu")
DIAG_ACTIVATIONS = ("softmax", "relu")


class _NormalizedOutput:
    """Mixin: the output normalisation over all heads, [B, T, H, Dh] -> same."""

    def _set_norm(self, norm_type: str, rms_form: str) -> None:
        check_choice("norm_type", norm_type, NORM_TYPES)
        check_choice("rms_form", rms_form, RMS_FORMS)
        self.norm_type = norm_type
        self.rms_form = rms_form

    def build(self, input_shape) -> None:
        super().build(input_shape)
        if self.norm_type == "layer":
            self.output_norm = keras.layers.LayerNormalization(
                axis=(-2, -1), dtype=self.dtype_policy, name="output_norm"
            )
            self.output_norm.build((None, None, self.num_heads, self.head_dim))

    def _normalize(self, x: Any) -> Any:
        if self.norm_type == "layer":
            return self.output_norm(x)
        if self.norm_type == "simple_rms":
            x = ops.cast(x, "float32")
            mean_square = ops.mean(ops.square(x), axis=(-2, -1), keepdims=True)
            if self.rms_form == "partf":
                return x * ops.rsqrt(mean_square + PARTF_RMS_EPSILON)
            # sqrt has no derivative at 0, where an all-zero output (every relu score
            # negative) puts it: the root of 1 stands in there, so the gradient is 0
            # there instead of NaN, and the value is the authors' everywhere.
            positive = mean_square > 0.0
            rms = ops.where(positive, ops.sqrt(ops.where(positive, mean_square, 1.0)), 0.0)
            return x / (rms + AUTHORS_RMS_EPSILON)
        return x


# position: none, as rotary cost 23% perplexity here (benchmarks/positions.py).
@register_attention("norm", position="none")
class NormAttention(_NormalizedOutput, FeatureMapAttention):
    """Causal NormAttention: unnormalised linear attention, then a normalisation.

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        chunk_size: tokens per chunk of the chunk-wise computation.
        feature_map: phi for queries and keys: "elu" (transnormer_t1), "elu+1"
            (transnormer_t2) or "relu".
        norm_type: output normalisation over the concatenated heads: "simple_rms"
            (both released models), "layer" or "none".
        rms_form: "authors" (x / (rms(x) + 1e-8)) or "partf" (x / sqrt(mean(x^2) + 1e-6)).

    State: `s` [B, H, Dh, Dh] = sum phi(k) v^T, float32. Exact. With `causal=False`,
    the sum is over the whole sequence and there is no state.

    Reference: Qin et al., "The Devil in Linear Transformer", EMNLP 2022."""

    normalize = False
    option_help = {
        "chunk_size": CHUNK_SIZE_HELP,
        "feature_map": "norm: feature map of queries and keys (elu, elu+1, relu)",
        "norm_type": "norm/diag: output normalisation (simple_rms, layer, none)",
        "rms_form": RMS_FORM_HELP,
    }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        chunk_size: int = 64,
        feature_map: str = "elu",
        norm_type: str = "simple_rms",
        rms_form: str = "authors",
        **kwargs: Any,
    ) -> None:
        super().__init__(d_model, num_heads, chunk_size=chunk_size, **kwargs)
        check_choice("feature_map", feature_map, FEATURE_MAPS)
        self._set_norm(norm_type, rms_form)
        self.feature_map = feature_map

    def phi(self, x: Any) -> Any:
        x = ops.cast(x, "float32")
        if self.feature_map == "elu":
            return ops.elu(x)
        if self.feature_map == "elu+1":
            return ops.elu(x) + 1.0
        return ops.relu(x)

    def features(self, q, k, state, training):
        return self.phi(q), self.phi(k), None, {}

    def finish(self, out: Any) -> Any:
        return self._normalize(out)


@register_attention("diag", position="rotary")
class DiagAttention(_NormalizedOutput, Attention):
    """Causal block-diagonal attention over fixed blocks of `window_size` tokens.

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        window_size: W, tokens per block; blocks start at stream positions 0, W, 2W, ...
            counting real tokens only (a pad takes no place and gets output zero).
        diag_activation: "relu" (transnormer_t1) or "softmax" (the paper's text, and
            transnormer_t2 with `norm_type="none"`) on the scores q . k / sqrt(Dh).
        norm_type, rms_form: as for `NormAttention`.

    State: `buf_k`, `buf_v` [B, W, H, Dh], `buf_valid` [B, W] (the open block's first
    tokens, left-aligned) and `offset` [B] int32, so segments equal one call. With
    `causal=False` each query sees every real token of its block; no state (but the
    rotary position)."""

    supports_rotary = True
    call_attend_options = {"skip_pads": True}
    option_help = {
        "window_size": WINDOW_SIZE_HELP,
        "diag_activation": "diag: score activation within a block (relu, softmax)",
        "norm_type": "norm/diag: output normalisation (simple_rms, layer, none)",
        "rms_form": RMS_FORM_HELP,
    }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        window_size: int = 64,
        diag_activation: str = "relu",
        norm_type: str = "simple_rms",
        rms_form: str = "authors",
        **kwargs: Any,
    ) -> None:
        super().__init__(d_model, num_heads, **kwargs)
        if window_size <= 0:
            raise ValueError(f"window_size must be positive, got {window_size}.")
        check_choice("diag_activation", diag_activation, DIAG_ACTIVATIONS)
        self._set_norm(norm_type, rms_form)
        self.window_size = window_size
        self.diag_activation = diag_activation

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        if not self.causal:  # one whole sequence per call: no open block to carry
            return self.position_state_spec(batch_size)
        kv = ((batch_size, self.window_size, self.num_heads, self.head_dim), "float32")
        return {
            "buf_k": kv,
            "buf_v": kv,
            "buf_valid": ((batch_size, self.window_size), "float32"),
            "offset": ((batch_size,), "int32"),
            **self.position_state_spec(batch_size),
        }

    def attend(
        self, q, k, v, state, mask=None, training=None, skip_pads=False
    ) -> tuple[Any, State]:
        """Per-head q, k, v [B, T, H, Dh] -> ([B, T, H, Dh], state); `skip_pads` as in
        `partf.attention.windowed`."""
        if not self.causal:
            return self.attend_blocks(q, k, v, mask, training), {}
        window, heads, dim = self.window_size, self.num_heads, self.head_dim
        batch, length = ops.shape(q)[0], ops.shape(q)[1]
        offset = state["offset"]
        valid = valid_tokens(mask, batch, length)
        order, place, filled = None, None, length
        if skip_pads and mask is not None:
            order, place, filled = real_token_layout(valid)
        # The carried tokens' own outputs were produced before: zeros stand in
        # for their queries.
        q_grid = to_grid(q, ops.zeros_like(state["buf_k"]), offset, window, order)
        k_grid = to_grid(k, state["buf_k"], offset, window, order)
        v_grid = to_grid(v, state["buf_v"], offset, window, order)
        valid_grid = grid_valid(valid, state["buf_valid"], offset, window, order)

        def windows(x):  # [B, L, ...] -> [B, n, W, ...]
            return ops.reshape(x, (batch, -1, window) + tuple(ops.shape(x)[2:]))

        logits = ops.einsum("bnihd,bnjhd->bnhij", windows(q_grid), windows(k_grid))
        logits = logits / math.sqrt(dim)
        causal = ops.arange(window)[:, None] >= ops.arange(window)[None, :]
        visible = ops.logical_and(causal[None, None, None], windows(valid_grid)[:, :, None, None])
        weights = self._block_weights(logits, visible, training)
        out = ops.einsum("bnhij,bnjhd->bnihd", weights, windows(v_grid))
        out = from_grid(ops.reshape(out, (batch, -1, heads, dim)), offset, length, place)
        out = self._normalize(out)
        if place is not None:
            # A pad shares the place of the next real token, whose output it must not read.
            out = ops.where(valid[:, :, None, None], out, 0.0)
        new_state = {
            "buf_k": grid_buffer(k_grid, offset, filled, window),
            "buf_v": grid_buffer(v_grid, offset, filled, window),
            "buf_valid": grid_buffer(ops.cast(valid_grid, "float32"), offset, filled, window),
            "offset": next_offset(offset, filled, window),
        }
        return ops.cast(out, q.dtype), new_state

    def _block_weights(self, logits: Any, visible: Any, training: Any) -> Any:
        if self.diag_activation == "softmax":
            weights = masked_softmax(logits, visible)
        else:
            weights = ops.where(visible, ops.relu(logits), 0.0)
        return self.dropout(weights, training=training)

    def attend_blocks(self, q, k, v, mask=None, training=None) -> Any:
        """Non-causal form: each query sees every real token of its block."""
        window, heads, dim = self.window_size, self.num_heads, self.head_dim
        batch, length = ops.shape(q)[0], ops.shape(q)[1]
        valid = valid_tokens(mask, batch, length, "float32")
        q_blocks = split_blocks(ops.cast(q, "float32"), window)  # [B, n, W, H, Dh]
        k_blocks = split_blocks(ops.cast(k, "float32"), window)
        v_blocks = split_blocks(ops.cast(v, "float32"), window)
        visible = split_blocks(valid, window)[:, :, None, None, :] > 0.5  # [B, n, 1, 1, W]
        logits = ops.einsum("bnihd,bnjhd->bnhij", q_blocks, k_blocks) / math.sqrt(dim)
        weights = self._block_weights(logits, visible, training)
        # A pad's value gets weight 0, but 0 * inf would still be NaN.
        v_blocks = ops.where(visible[:, :, 0, 0, :, None, None], v_blocks, 0.0)
        out = ops.einsum("bnhij,bnjhd->bnihd", weights, v_blocks)
        out = ops.reshape(out, (batch, -1, heads, dim))[:, :length]
        return ops.cast(self._normalize(out), q.dtype)

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Softmax (or ReLU) attention within each window of W tokens; non-causally the
        # sequence is cut into whole blocks of W, the last one padded.
        flops = 4.0 * self.window_size * self.num_heads * self.head_dim
        if self.causal:
            return flops
        padded = -(-seq_len // self.window_size) * self.window_size
        return flops * padded / seq_len
