"""Performer attention: FAVOR+ positive orthogonal random features (Choromanski et al., 2021).

With x' = x / Dh^(1/4) and random rows w_r ~ N(0, I),

    phi(x)_r = exp(w_r . x' - |x'|^2 / 2) / sqrt(F),    E[phi(q) . phi(k)] = exp(q . k / sqrt(Dh)),

so causal linear attention with phi estimates the softmax kernel without bias (as RFA,
Peng et al., 2021); orthogonal blocks of rows lower the variance. The query features are
divided by their per-token largest value, and the key features are passed to the kernel
as (exp(raw - a), a) with a their largest log-value, so nothing overflows in float32 or
bfloat16 and no later token can change an earlier output.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from partf.attention.base import State
from partf.attention.chunked import CHUNK_SIZE_HELP
from partf.attention.linear import FeatureMapAttention
from partf.attention.registry import register_attention
from partf.random import normal as normal_draws


def draw_orthogonal_features(num_heads: int, num_features: int, head_dim: int, seed: Any) -> Any:
    """Random feature rows [H, F, Dh]: orthogonal blocks, chi-distributed row lengths.

    Each block of Dh rows is the orthonormal Q of a Gaussian matrix; each row
    is then scaled to the length of an independent Gaussian vector, so every
    row is marginally N(0, I) while rows within a block are orthogonal.
    """
    blocks = -(-num_features // head_dim)
    gaussian = normal_draws((num_heads, blocks, head_dim, head_dim), seed)
    q, r = ops.qr(gaussian)  # orthonormal columns
    # Householder QR fixes the sign of each column (its first entry is always
    # of one sign): flip by sign(diag R) so the directions are uniform (Haar).
    q = q * ops.sign(ops.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
    rows = ops.reshape(ops.swapaxes(q, -1, -2), (num_heads, blocks * head_dim, head_dim))
    rows = rows[:, :num_features]
    lengths = ops.norm(normal_draws((num_heads, num_features, head_dim), seed), axis=-1)
    return rows * lengths[..., None]


def favor_log_features(x: Any, projection: Any) -> Any:
    """log phi(x) up to the constant -log(sqrt(F)): w . x' - |x'|^2 / 2, float32
    [B, T, H, F] of x [B, T, H, Dh] and `projection` [H, F, Dh] (or [B, H, F, Dh])."""
    x = ops.cast(x, "float32")
    head_dim = ops.shape(x)[-1]
    x = x * (float(head_dim) ** -0.25)
    equation = "bthd,hfd->bthf" if len(projection.shape) == 3 else "bthd,bhfd->bthf"
    projected = ops.einsum(equation, x, ops.cast(projection, "float32"))
    return projected - 0.5 * ops.sum(ops.square(x), axis=-1, keepdims=True)


@register_attention("performer", position="rotary")
class PerformerAttention(FeatureMapAttention):
    """Causal FAVOR+ attention (positive orthogonal random features).

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        num_features: F, random features per head.
        redraw: training draws fresh features whenever a stream starts (empty state)
            and keeps them in the state for the rest of it, so carried sums always match
            the features reading them; False (default): one draw at build time serves
            everything. Inference always uses the build-time draw.
        chunk_size: tokens per chunk of the chunk-wise computation.
        seed: seed of the layer's `SeedGenerator` (the random features).

    State: `s` [B, H, F, Dh], `z` [B, H, F], `m` [B, H] (sums relative to exp(m)),
    float32; with `redraw`, also `projection` [B, H, F, Dh].

    Reference: Choromanski et al., "Rethinking Attention with Performers", ICLR 2021;
    Peng et al., "Random Feature Attention", ICLR 2021."""

    log_scaled = True
    # exp(q . k) is what the features estimate: rotating q and k keeps the estimate
    # unbiased for the rotated scores, which depend on relative positions.
    rotates_projections = True
    option_help = {
        "num_features": "random features per head (performer)",
        "redraw": "performer: draw new random features for each new stream in training",
        "chunk_size": CHUNK_SIZE_HELP,
    }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_features: int = 128,
        redraw: bool = False,
        chunk_size: int = 64,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(d_model, num_heads, chunk_size=chunk_size, **kwargs)
        if num_features <= 0:
            raise ValueError(f"num_features must be positive, got {num_features}.")
        self.num_features = num_features
        self.redraw = bool(redraw)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    @property
    def feature_dim(self) -> int:
        return self.num_features

    def build(self, input_shape) -> None:
        super().build(input_shape)
        self.projection = self.add_weight(
            name="projection",
            shape=(self.num_heads, self.num_features, self.head_dim),
            initializer=lambda shape, dtype=None: self.draw_features(),
            trainable=False,
            dtype="float32",
        )

    def draw_features(self) -> Any:
        """A fresh [H, F, Dh] draw from the layer's seed generator."""
        return draw_orthogonal_features(
            self.num_heads, self.num_features, self.head_dim, self.seed_generator
        )

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        spec = super().state_spec(batch_size)
        if self.redraw and self.causal:
            shape = (batch_size, self.num_heads, self.num_features, self.head_dim)
            spec["projection"] = (shape, "float32")
        return spec

    def current_projection(self, state: State, training: bool | None) -> Any:
        """[H, F, Dh], or [B, H, F, Dh] when each stream keeps its own draw."""
        if not self.redraw:
            return self.projection
        fresh = self.draw_features() if training else ops.convert_to_tensor(self.projection)
        if not self.causal:  # each call is a whole sequence: a fresh draw per call
            return fresh
        # A stream with no keys summed yet may take the new draw.
        empty = ops.sum(ops.abs(state["z"]), axis=(1, 2)) <= 0.0  # [B]
        return ops.where(empty[:, None, None, None], fresh[None], state["projection"])

    def features(self, q, k, state, training):
        projection = self.current_projection(state, training)
        q_log = favor_log_features(q, projection)
        k_log = favor_log_features(k, projection)
        # Dividing a query's features by their largest value changes numerator
        # and denominator alike; the key's largest log-value goes to the kernel.
        q_feat = ops.exp(q_log - ops.stop_gradient(ops.max(q_log, axis=-1, keepdims=True)))
        k_scale = ops.stop_gradient(ops.max(k_log, axis=-1))
        k_feat = ops.exp(k_log - k_scale[..., None])
        extra = {"projection": projection} if self.redraw and self.causal else {}
        return q_feat, k_feat, k_scale, extra

    def feature_map_flops(self) -> float:
        # Queries and keys are each projected onto the F random features.
        return 4.0 * self.head_dim * self.num_features
