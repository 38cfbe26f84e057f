"""LARA: linear randomized attention (Zheng et al., 2022). Non-causal only.

Random feature attention uses one proposal distribution for every query; LARA uses C,
one per landmark (a contiguous segment), combined by multiple importance sampling. With
q_bar_c, k_bar_c the segment means of f_q(q), f_k(k) (a linear map and a layer norm),
mu_c = q_bar_c + k_bar_c and w_c = mu_c + noise (training) or mu_c (evaluation):

    log p_c(x)  = (w_c . x - |x|^2 / 2) / sqrt(Dh)             (positive random feature)
    kv_c        = sum_m softmax_m(log p_c(k_m)) v_m             (self-normalised estimate)
    log r_cn    = log alpha_cn + log p_c(q_n) + logsumexp_m log p_c(k_m) - log p_c(mu_c)
    out_n       = sum_c softmax_c(log r_cn) kv_c

with the authors' "mis-opt" weights alpha_cn = balance heuristic + alpha_coeff *
(t_cn - mean_c t_cn), t_cn = softmax over n of q_bar_c . q_n / sqrt(Dh). Every landmark
summarises later tokens too, so LARA cannot be causal (`supports_causal = False`).
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from partf.attention.base import Attention, State
from partf.attention.masking import MASKED, masked_softmax, valid_tokens
from partf.attention.projection_net import ProjectionNet
from partf.attention.registry import register_attention
from partf.random import normal as normal_draws


def _logsumexp(x: Any, valid: Any, axis: int) -> Any:
    x = ops.where(valid, x, MASKED)
    top = ops.stop_gradient(ops.max(x, axis=axis, keepdims=True))
    total = ops.sum(ops.where(valid, ops.exp(x - top), 0.0), axis=axis, keepdims=True)
    return ops.squeeze(top + ops.log(ops.maximum(total, 1e-30)), axis=axis)


@register_attention("lara", position="none")
class LaraAttention(Attention):
    """Non-causal LARA attention (multiple importance sampling over landmarks); no state.

    Args:
        d_model, num_heads, head_dim, dropout_rate, use_bias: see `Attention`.
        causal: must be False (the default here).
        num_landmarks: C, number of landmarks (segments) and proposals.
        alpha_coeff: weight of the query-dependent part of the mis-opt weights.
        seed: seed of the layer's `SeedGenerator` (the proposal samples).

    Reference: Zheng et al., "Linear Complexity Randomized Self-attention Mechanism",
    ICML 2022."""

    supports_causal = False
    option_help = {
        "num_landmarks": "lara: landmarks (segments, one proposal each)",
        "alpha_coeff": "lara: weight of the query-dependent mixing weights",
    }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_landmarks: int = 16,
        alpha_coeff: float = 1.0,
        seed: int | None = None,
        causal: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(d_model, num_heads, causal=causal, **kwargs)
        if num_landmarks <= 0:
            raise ValueError(f"num_landmarks must be positive, got {num_landmarks}.")
        self.num_landmarks = num_landmarks
        self.alpha_coeff = float(alpha_coeff)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape) -> None:
        super().build(input_shape)
        self.project_q = ProjectionNet(self, self.head_dim, "project_q")
        self.project_k = ProjectionNet(self, self.head_dim, "project_k")

    def landmarks(self, q: Any, k: Any, valid: Any) -> tuple[Any, Any, Any]:
        """(q_bar, k_bar [B, C, H, Dh], bool [B, C] non-empty landmarks)."""
        # Token t belongs to segment floor(t * C / T): contiguous, near-equal segments.
        length = ops.shape(q)[1]
        positions = ops.arange(length, dtype="int32")
        segment = (positions * self.num_landmarks) // ops.cast(length, "int32")
        segments = ops.one_hot(segment, self.num_landmarks, dtype="float32")  # [T, C]
        weights = segments[None] * ops.cast(valid, "float32")[..., None]  # [B, T, C]
        count = ops.sum(weights, axis=1)  # [B, C]
        weights = weights / ops.maximum(count, 1.0)[:, None, :]

        def pooled(net, x):
            return ops.einsum("btc,bthd->bchd", weights, net(x))

        return pooled(self.project_q, q), pooled(self.project_k, k), count > 0.0

    def attend(self, q, k, v, state, mask=None, training=None) -> tuple[Any, State]:
        batch, length = ops.shape(q)[0], ops.shape(q)[1]
        valid = valid_tokens(mask, batch, length)
        q32, k32, v32 = (ops.cast(x, "float32") for x in (q, k, v))
        q_bar, k_bar, has = self.landmarks(q32, k32, valid)
        mu = q_bar + k_bar  # [B, C, H, Dh]
        omega = mu
        if training:
            omega = mu + normal_draws(tuple(ops.shape(mu)), self.seed_generator)
        scale = 1.0 / math.sqrt(self.head_dim)

        def log_feature(x):  # (w_c . x_n - |x_n|^2 / 2) / sqrt(Dh): [B, C, H, T]
            square = ops.transpose(ops.sum(ops.square(x), axis=-1), (0, 2, 1))[:, None]
            return (ops.einsum("bchd,bnhd->bchn", omega, x) - 0.5 * square) * scale

        log_q, log_k = log_feature(q32), log_feature(k32)
        key_ok = valid[:, None, None, :]
        kv = ops.einsum("bchn,bnhd->bchd", masked_softmax(log_k, key_ok), v32)  # [B, C, H, Dh]

        # Proposal densities of the samples: log p_c(mu_c') for every pair.
        mu_sq = ops.transpose(ops.sum(ops.square(mu), axis=-1), (0, 2, 1))[:, None]  # [B,1,H,C']
        log_mu = (ops.einsum("bchd,behd->bche", omega, mu) - 0.5 * mu_sq) * scale  # [B,C,H,C']
        landmark_ok = has[:, None, None, :]
        diagonal = ops.eye(self.num_landmarks, dtype="float32")[None, :, None, :]
        log_proposal = ops.sum(log_mu * diagonal, axis=-1)  # log p_c(mu_c) [B, C, H]
        balance = ops.exp(log_proposal - _logsumexp(log_mu, landmark_ok, axis=-1))
        # Query-dependent part; zero-mean over the landmarks, so the weights still sum to 1.
        t = masked_softmax(ops.einsum("bchd,bnhd->bchn", q_bar, q32) * scale, key_ok)
        count = ops.maximum(ops.sum(ops.cast(has, "float32"), axis=1), 1.0)[:, None, None, None]
        t_mean = ops.sum(ops.where(has[:, :, None, None], t, 0.0), axis=1, keepdims=True) / count
        alpha = balance[..., None] + self.alpha_coeff * (t - t_mean)
        log_keys = _logsumexp(log_k, key_ok, axis=-1)[..., None]  # logsumexp_m log p_c(k_m)
        log_ratio = ops.log(ops.maximum(alpha, 1e-8)) + log_q + log_keys - log_proposal[..., None]
        weights = masked_softmax(log_ratio, has[:, :, None, None], axis=1)  # over landmarks
        weights = self.dropout(weights, training=training)
        out = ops.einsum("bchn,bchd->bnhd", weights, kv)
        return ops.cast(out, q.dtype), {}

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Every token's query and key through the proposal nets (Dh x Dh each), then per
        # landmark 2 H Dh each: pooling queries and keys into landmarks, the query and
        # key log-features, the landmark values, the query-dependent weights and the
        # output mix; the landmarks' own densities (C x C) are shared by the T tokens.
        landmarks, width = self.num_landmarks, self.num_heads * self.head_dim
        nets = 2 * 2.0 * width * self.head_dim
        proposals = 2.0 * landmarks * landmarks * width / seq_len
        return nets + 14.0 * landmarks * width + proposals
