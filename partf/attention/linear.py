"""Linear attention with the elu + 1 feature map (Katharopoulos et al., 2020).

softmax(q . k) is replaced by phi(q) . phi(k), phi(x) = elu(x) + 1 > 0, so
out_i = phi(q_i) S_i / (phi(q_i) . z_i) with S_i = sum_{j<=i} phi(k_j) v_j^T and
z_i = sum_{j<=i} phi(k_j) as the state: unbounded context at constant cost per token.
`FeatureMapAttention` is the base of every mechanism of this form (Performer,
NormAttention): a subclass says how features are made, and `partf.attention.chunked`
does the rest.

Rotary positions rotate the features, not the projections (RoFormer, section 3.4.3):
rotating q and k before an element-wise feature map would not make scores depend on
relative positions. A normalised mechanism keeps the unrotated phi(q_i) . phi(k_j) as
its denominator, which stays positive. Performer's features estimate exp(q . k) itself,
so it rotates q and k.
"""

from __future__ import annotations

from typing import Any

from keras import ops

from partf.attention.base import Attention, State
from partf.attention.bidirectional import noncausal_linear_attention
from partf.attention.chunked import CHUNK_SIZE_HELP, causal_linear_attention, linear_state_spec
from partf.attention.positions import apply_rotary
from partf.attention.registry import register_attention


class FeatureMapAttention(Attention):
    """Base of linear attentions phi(q) . phi(k), causal with running sums as state; with
    `causal=False` every query reads the sums over the whole sequence
    (`partf.attention.bidirectional`) and there is no state (but the rotary position).

    Subclasses implement `features` and may set `normalize` (divide by phi(q) . z) and
    `log_scaled` (key features come with log-scales, see `causal_linear_attention`).
    `chunk_size` is a speed knob only. With `rotary` (and features not log-scaled), the
    state holds the sums of the rotated features, `s`, and, when normalising, the plain
    feature sum as `den_s` [B, H, F, 1] in place of `z`."""

    normalize: bool = True
    log_scaled: bool = False
    supports_rotary = True
    rotates_projections = False

    def __init__(self, d_model: int, num_heads: int, chunk_size: int = 64, **kwargs: Any):
        super().__init__(d_model, num_heads, **kwargs)
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}.")
        self.chunk_size = chunk_size

    @property
    def feature_dim(self) -> int:
        """F, the width of phi(x)."""
        return self.head_dim

    @property
    def rotates_features(self) -> bool:
        """Whether rotary positions rotate the features (not the projections)."""
        return self.rotary and not self.rotates_projections

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        heads, features = self.num_heads, self.feature_dim
        if not self.causal:  # every call reads its whole sequence: no sums to carry
            return self.position_state_spec(batch_size)
        if self.rotates_features:
            spec = linear_state_spec(batch_size, heads, features, self.head_dim, normalize=False)
            if self.normalize:  # the unrotated denominator: a sum for a value of 1
                den = linear_state_spec(batch_size, heads, features, 1, False, prefix="den_")
                spec.update(den)
        else:
            spec = linear_state_spec(
                batch_size,
                heads,
                features,
                self.head_dim,
                normalize=self.normalize,
                log_scale=self.log_scaled,
            )
        return {**spec, **self.position_state_spec(batch_size)}

    def features(
        self, q: Any, k: Any, state: State, training: bool | None
    ) -> tuple[Any, Any, Any | None, State]:
        """(phi(q) [B, T, H, F], phi(k) [B, T, H, F], key log-scales [B, T, H]
        or None, extra state entries to carry)."""
        raise NotImplementedError

    def attend(self, q, k, v, state, mask=None, training=None) -> tuple[Any, State]:
        q_feat, k_feat, log_scale, extra = self.features(q, k, state, training)
        if self.rotates_features:
            out, new_state = self._rotated(q_feat, k_feat, v, state, mask)
        else:
            kernel = {"chunk_size": self.chunk_size, "normalize": self.normalize}
            out, new_state = self.linear_kernel(
                q_feat, k_feat, v, state, k_log_scale=log_scale, mask=mask, **kernel
            )
        return ops.cast(self.finish(out), q.dtype), {**new_state, **extra}

    def linear_kernel(self, q_feat, k_feat, v, state, **kwargs: Any) -> tuple[Any, State]:
        """`causal_linear_attention`, or without the causal mask its non-causal form
        (no state: `chunk_size` and `prefix` only name the causal kernel's chunks and
        state entries)."""
        if self.causal:
            return causal_linear_attention(q_feat, k_feat, v, state, **kwargs)
        kwargs.pop("chunk_size", None)
        kwargs.pop("prefix", None)
        return noncausal_linear_attention(q_feat, k_feat, v, **kwargs), {}

    def _rotated(self, q_feat, k_feat, v, state, mask) -> tuple[Any, State]:
        """Linear attention with rotated features in the numerator (see the module
        docstring): float32 output [B, T, H, Dv] and the new sums."""
        batch, length = ops.shape(v)[0], ops.shape(v)[1]
        positions = self.token_positions(state, mask, batch, length)
        q_rot, k_rot = apply_rotary(q_feat, positions), apply_rotary(k_feat, positions)
        common = dict(mask=mask, chunk_size=self.chunk_size, normalize=False)
        num, new_state = self.linear_kernel(q_rot, k_rot, v, state, **common)
        if not self.normalize:
            return num, new_state
        ones = ops.ones_like(ops.cast(v[..., :1], "float32"))
        den, den_state = self.linear_kernel(q_feat, k_feat, ones, state, prefix="den_", **common)
        # An empty prefix gives 0 / 0: answer 0 there, as the plain kernel does.
        out = num / ops.where(den > 0.0, den, 1.0)
        return out, {**new_state, **den_state}

    def finish(self, out: Any) -> Any:
        """Hook on the float32 output [B, T, H, Dv] before it is cast back."""
        return out

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Chunk-wise: within a chunk of C tokens, scores and values as in softmax
        # attention; between chunks, phi(q) S (F x Dv) and the chunk's phi(k)^T v
        # added to S. Rotated features with a denominator run the kernel once more
        # for a one-column value.
        features, values = self.feature_dim, self.head_dim
        if not self.causal:
            # One sum over the sequence, S = sum_j g_j v_j^T (F x Dv), read by every query
            # (f_i S); the denominator f_i . z (z a plain sum), or with rotated features a
            # second pass for a one-column value.
            per_head = 4.0 * features * values
            if self.normalize:
                per_head += (4.0 if self.rotates_features else 2.0) * features
            return self.num_heads * (per_head + self.feature_map_flops())
        chunk = min(self.chunk_size, seq_len)
        per_head = 2.0 * chunk * (features + values) + 4.0 * features * values
        if self.rotates_features and self.normalize:
            per_head += 2.0 * chunk * (features + 1) + 4.0 * features
        return self.num_heads * (per_head + self.feature_map_flops())

    def feature_map_flops(self) -> float:
        """FLOPs per token and head of computing phi(q) and phi(k) (0: element-wise)."""
        return 0.0


@register_attention("linear", position="rotary")
class LinearAttention(FeatureMapAttention):
    """Causal linear attention with phi(x) = elu(x) + 1. Arguments as `FeatureMapAttention`.

    State: `s` [B, H, Dh, Dh] = sum phi(k) v^T and `z` [B, H, Dh] = sum phi(k), float32.
    Exact: segments with carried state equal one call.

    Reference: Katharopoulos et al., "Transformers are RNNs: Fast Autoregressive
    Transformers with Linear Attention", ICML 2020."""

    option_help = {"chunk_size": CHUNK_SIZE_HELP}

    def features(self, q, k, state, training):
        q_feat, k_feat = (ops.elu(ops.cast(x, "float32")) + 1.0 for x in (q, k))
        return q_feat, k_feat, None, {}
