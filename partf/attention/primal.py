"""Primal-Attention: attention as kernel SVD in its primal, low-rank form (Chen et al., 2023).

Each token gets two score vectors of rank s per head,

    e_i = phi(q_i) W_e [s],    r_i = phi(k_i) W_r [s],    out_i = [e_i, r_i] W_c [Dh],

with phi(x) = x / |x| and W_e, W_r [Dh, s] learned: no values and no T x T matrix. The
authors' causal form replaces q_i and k_i by their running means over positions <= i;
since phi ignores length, the running sums suffice, and they are the state. Training
adds the KSVD regulariser eta * J, as in the authors' criterion,

    J = ( mean |e Lambda|^2 / 2 + mean |r Lambda|^2 / 2 - Tr(mean_h W_e^T W_r) )^2,

(means over heads and tokens, then over the batch; Lambda [H, s] learned), with
`add_loss`, so any Keras model using the layer trains with it.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from partf.attention.base import Attention, State
from partf.attention.masking import valid_tokens
from partf.attention.registry import register_attention


def _orthogonal_per_head(seed: Any):
    def initializer(shape, dtype=None):
        heads, rows, cols = shape
        orthogonal = keras.initializers.Orthogonal(seed=seed)
        return ops.stack([orthogonal((rows, cols), dtype=dtype) for _ in range(heads)])

    return initializer


def l2_normalize(x: Any, axis: int = -1, eps: float = 1e-12) -> Any:
    """x / max(|x|, eps), like torch's F.normalize."""
    norm = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=True))
    return x / ops.maximum(norm, eps)


# position: none (no rotary; sinusoidal and learned cost 9 to 32%, benchmarks/positions.py).
@register_attention("primal", position="none")
class PrimalAttention(Attention):
    """Causal Primal-Attention with the KSVD regulariser added as a layer loss.

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        low_rank: s, the rank of the primal projections W_e, W_r.
        eta: weight of the KSVD regulariser in the training loss (0 disables it).
        seed: seed of the orthogonal initialisation of W_e and W_r.

    State: `sum_q`, `sum_k` [B, H, Dh], the running sums of queries and keys, float32.

    Reference: Chen et al., "Primal-Attention: Self-attention through Asymmetric Kernel
    SVD in Primal Representation", NeurIPS 2023."""

    uses_values = False
    # The layer's only token mixing is the causal running mean of q and k: over the
    # whole sequence it is one mean shared by every position, so all outputs would be
    # equal. The authors' non-causal Primal builds W_e, W_r from the data instead.
    supports_noncausal = False
    noncausal_help = (
        "its token mixing is the causal running mean; use softmax, linear, norm or lara "
        "in a bidirectional model."
    )
    # The KSVD term joins the loss (add_loss) and the logs under this name.
    loss_name = "ksvd_loss"
    option_help = {
        "low_rank": "primal: rank s of the KSVD projections",
        "eta": "primal: weight of the KSVD regulariser in the loss",
    }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        low_rank: int = 30,
        eta: float = 0.1,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(d_model, num_heads, **kwargs)
        if low_rank <= 0:
            raise ValueError(f"low_rank must be positive, got {low_rank}.")
        if eta < 0:
            raise ValueError(f"eta must be >= 0, got {eta}.")
        self.low_rank = low_rank
        self.eta = float(eta)
        self.seed = seed

    def build(self, input_shape) -> None:
        super().build(input_shape)  # no value projection: uses_values is False
        shape = (self.num_heads, self.head_dim, self.low_rank)
        seed = keras.random.SeedGenerator(self.seed)
        self.w_e = self.add_weight(name="w_e", shape=shape, initializer=_orthogonal_per_head(seed))
        self.w_r = self.add_weight(name="w_r", shape=shape, initializer=_orthogonal_per_head(seed))
        self.lam = self.add_weight(
            name="lambda",
            shape=(self.num_heads, self.low_rank),
            initializer=keras.initializers.RandomUniform(0.0, 1.0, seed=seed),
        )
        # [e, r] (2s) -> Dh, shared by the heads, with a bias as in the authors' code.
        self.combine = keras.layers.Dense(self.head_dim, dtype=self.dtype_policy, name="combine")
        self.combine.build((None, None, self.num_heads, 2 * self.low_rank))
        self.built = True

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        shape = ((batch_size, self.num_heads, self.head_dim), "float32")
        return {"sum_q": shape, "sum_k": shape}

    def call(self, x, state=None, mask=None, training=None) -> tuple[Any, State]:
        x = ops.cast(x, self.compute_dtype)
        if state is None:
            state = self.get_initial_state(ops.shape(x)[0])
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        valid = ops.cast(valid_tokens(mask, batch, length), "float32")[:, :, None, None]
        q = ops.cast(self.query_dense(x), "float32") * valid  # [B, T, H, Dh]
        k = ops.cast(self.key_dense(x), "float32") * valid
        # Keras casts floating call arguments, the state included, to the compute dtype
        # under mixed precision; the running sums stay float32.
        sum_q = ops.cumsum(q, axis=1) + ops.cast(state["sum_q"], "float32")[:, None]
        sum_k = ops.cumsum(k, axis=1) + ops.cast(state["sum_k"], "float32")[:, None]
        # phi(mean) == phi(sum): the running count cancels in the normalisation.
        e = ops.einsum("bthd,hds->bths", l2_normalize(sum_q), ops.cast(self.w_e, "float32"))
        r = ops.einsum("bthd,hds->bths", l2_normalize(sum_k), ops.cast(self.w_r, "float32"))
        out = self.combine(ops.cast(ops.concatenate([e, r], axis=-1), self.compute_dtype))
        y = self.dropout(self.output_dense(out), training=training)
        if self.adds_loss():
            self.add_loss(self.eta * self.ksvd_loss(e, r, valid[:, :, 0, 0]))
        return y, {"sum_q": sum_q[:, -1], "sum_k": sum_k[:, -1]}

    def adds_loss(self) -> bool:
        """Whether the KSVD term joins the loss: only with a positive `eta`."""
        return self.eta > 0

    def ksvd_loss(self, e: Any, r: Any, valid: Any) -> Any:
        """J: the squared KSVD objective of the authors' criterion, over valid tokens, of
        the score vectors e, r [B, T, H, s] (`valid` float [B, T])."""
        lam = ops.cast(self.lam, "float32")
        count = ops.maximum(ops.sum(valid, axis=1), 1.0) * self.num_heads  # [B]

        def energy(scores):  # mean over heads and tokens of |scores * Lambda|^2 / 2
            per_token = ops.sum(ops.square(scores * lam), axis=(2, 3)) * valid  # [B, T]
            return ops.sum(per_token, axis=1) / count / 2.0

        trace = ops.sum(ops.cast(self.w_e, "float32") * ops.cast(self.w_r, "float32"))
        trace = trace / self.num_heads
        return ops.mean(ops.square(energy(e) + energy(r) - trace))

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Running sums of queries and keys projected onto the s-dimensional e and r,
        # then [e, r] (2s) combined back to Dh per head.
        rank, heads = self.low_rank, self.num_heads
        return heads * (2 * 2.0 * self.head_dim * rank + 2.0 * 2 * rank * self.head_dim)
