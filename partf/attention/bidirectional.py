"""Non-causal linear attention: the kernel every linear mechanism uses in an encoder.

Without a causal mask every query reads the same sums over all real keys,

    S = sum_j g_j v_j^T [B, H, F, Dv],    z = sum_j g_j [B, H, F],
    out_i = f_i S / (f_i . z)             (or f_i S alone, unnormalised),

so the cost is linear in the length and nothing is carried between calls.
Key features may carry log-scales a_j (true feature g_j * exp(a_j)), as in
`partf.attention.chunked`; here one maximum over the sequence's real keys is
the reference point, so exp never overflows.
"""

from __future__ import annotations

from typing import Any

from keras import ops

from partf.attention.masking import MASKED, valid_tokens


def noncausal_linear_attention(
    q_feat: Any,
    k_feat: Any,
    v: Any,
    *,
    k_log_scale: Any | None = None,
    mask: Any | None = None,
    normalize: bool = True,
) -> Any:
    """Every query f [B, T, H, F] against every real key g [B, T, H, F] (true feature
    g * exp(a), `k_log_scale` a [B, T, H] when given) and value v [B, T, H, Dv]: out
    [B, T, H, Dv] float32, divided by f . z unless `normalize` is False. A False in `mask`
    (bool [B, T]) makes a key count for nothing, whatever it holds; a query with no real
    key gets zeros."""
    f = ops.cast(q_feat, "float32")
    g = ops.cast(k_feat, "float32")
    v = ops.cast(v, "float32")
    batch, length = ops.shape(f)[0], ops.shape(f)[1]
    valid = valid_tokens(mask, batch, length)[:, :, None, None]  # [B, T, 1, 1]
    if k_log_scale is not None:
        a = ops.where(valid[..., 0], ops.cast(k_log_scale, "float32"), MASKED)  # [B, T, H]
        # A reference point only (the output does not depend on it): no gradient.
        top = ops.stop_gradient(ops.max(a, axis=1, keepdims=True))
        g = g * ops.exp(a - top)[..., None]
    # `where`, not a product: a pad holding inf or NaN must still count for nothing.
    g = ops.where(valid, g, 0.0)
    v = ops.where(valid, v, 0.0)
    s = ops.einsum("bthf,bthd->bhfd", g, v)
    out = ops.einsum("bthf,bhfd->bthd", f, s)
    if not normalize:
        return out
    z = ops.sum(g, axis=1)  # [B, H, F]
    den = ops.einsum("bthf,bhf->bth", f, z)[..., None]
    # No real key gives 0 / 0: answer 0 there, as the causal kernel does.
    return out / ops.where(den > 0.0, den, 1.0)
