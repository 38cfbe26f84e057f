"""Chunk-wise causal linear attention: the one kernel every linear mechanism shares.

At position i, for query features f, key features g [B, T, H, F] and values v,

    num_i = sum_{j<=i} (f_i . g_j) v_j        den_i = sum_{j<=i} f_i . g_j
    out_i = num_i / den_i                      (or num_i alone, unnormalised)

Everything before the segment is the state S = sum_j g_j v_j^T [B, H, F, Dv] and
z = sum_j g_j [B, H, F]. Inside a chunk of `chunk_size` tokens the masked quadratic form
is computed directly; between chunks the state is carried, so the cost is linear.

Key features may carry a log-scale `a_j` (true feature g_j * exp(a_j)), which
softmax-like kernels (Performer, Fastformer) need because exp(a_j) overflows. Every sum
is kept relative to the running maximum m of the log-scales seen so far, and position i
only uses a_j - m_i <= 0, so nothing overflows and no future token can change an earlier
output, even through rounding. Between chunks this is the linear recurrence
P_{c+1} = d_c P_c + U_c with d_c = exp(M_{c-1} - M_c) <= 1, a loop over the chunks.
Everything runs in float32, so the carried sums stay exact enough under mixed precision.
"""

from __future__ import annotations

import math
from typing import Any

from keras import ops

from partf.attention.masking import MASKED, valid_tokens

#: The `chunk_size` option's help, shared by every mechanism that has one.
CHUNK_SIZE_HELP = "tokens per chunk (linear attentions: speed only; eva: tokens per summary)"


def linear_state_spec(
    batch_size: int,
    num_heads: int,
    feature_dim: int,
    value_dim: int,
    normalize: bool = True,
    log_scale: bool = False,
    prefix: str = "",
) -> dict[str, tuple[tuple[int, ...], str]]:
    """State shapes for `causal_linear_attention`, keys prefixed by `prefix`.

    `s` [B, H, F, Dv] is sum g v^T, `z` [B, H, F] sum g (kept when normalising
    or when log-scales are used, which need it to tell an empty state), `m`
    [B, H] the log-scale both are relative to. All float32; zeros = no context.
    """
    spec = {prefix + "s": ((batch_size, num_heads, feature_dim, value_dim), "float32")}
    if normalize or log_scale:
        spec[prefix + "z"] = ((batch_size, num_heads, feature_dim), "float32")
    if log_scale:
        spec[prefix + "m"] = ((batch_size, num_heads), "float32")
    return spec


def _shift_right(x: Any, shift: Any, fill: float) -> Any:
    """x shifted by `shift` along axis 2, the first `shift` entries `fill`."""
    padding = [[0, 0]] * len(x.shape)
    padding[2] = [shift, 0]
    return ops.pad(x, padding, constant_values=fill)[:, :, : ops.shape(x)[2]]


def _doubling_scan(combine: Any, elements: tuple, identities: tuple) -> tuple:
    """Inclusive scan along axis 2 by log-depth doubling.

    After the step with shift s, entry c combines entries c - 2s < c' <= c.
    `combine(earlier, later)` is associative; `identities` are its neutral
    values, filling the shifted-in entries. Written out instead of
    `ops.associative_scan`, whose TensorFlow form branches on the length and
    does not compile with XLA.
    """

    def step(shift, elements):
        earlier = tuple(
            _shift_right(x, shift, fill) for x, fill in zip(elements, identities, strict=True)
        )
        return combine(earlier, elements)

    length = elements[0].shape[2]
    if length is not None:  # static: unrolled, log2(n) steps
        shift = 1
        while shift < length:
            elements, shift = step(shift, elements), shift * 2
        return elements
    length = ops.shape(elements[0])[2]
    _, elements = ops.while_loop(
        lambda shift, _: shift < length,
        lambda shift, elements: (shift * 2, step(shift, elements)),
        (ops.convert_to_tensor(1), elements),
    )
    return elements


def _scan_decayed(decay: Any, update: Any) -> tuple[Any, Any]:
    """Inclusive scan of P_c = decay_c * P_{c-1} + U_c over chunks (axis 2), P_{-1} = 0:
    (product of the decays up to c [B, H, n], P [B, H, n, F, V]).

    A sequential loop: each step touches one [B, H, F, V] state, the cost of a cumulative
    sum (a log-depth parallel scan passes over all chunk states log2(n) times, and its
    backward pass dominated at long lengths). The doubling scan serves when the number
    of chunks is unknown while tracing."""
    if decay.shape[2] is None:

        def combine(earlier, later):
            (d_early, u_early), (d_late, u_late) = earlier, later
            return d_early * d_late, d_late[..., None, None] * u_early + u_late

        return _doubling_scan(combine, (decay, update), (1.0, 0.0))

    # Two unrolled loops of about sqrt(n) steps each (static shapes, so XLA
    # compiles it with its gradient): first within groups of g chunks, all
    # groups at once, then across the groups, whose carried-in state is then
    # added with the decay since the group's start.
    length = decay.shape[2]
    size = max(1, math.isqrt(length - 1) + 1) if length > 1 else 1  # g = ceil(sqrt(n))
    groups = -(-length // size)
    pad = groups * size - length
    batch, heads = ops.shape(decay)[0], ops.shape(decay)[1]
    d = ops.reshape(
        ops.pad(decay, [[0, 0], [0, 0], [0, pad]], constant_values=1.0),
        (batch, heads, groups, size),
    )
    u = ops.pad(update, [[0, 0], [0, 0], [0, pad], [0, 0], [0, 0]])
    u = ops.reshape(u, (batch, heads, groups, size) + tuple(ops.shape(update)[3:]))

    state, local = ops.zeros_like(u[:, :, :, 0]), []
    for j in range(size):
        state = d[:, :, :, j][..., None, None] * state + u[:, :, :, j]
        local.append(state)
    local = ops.stack(local, axis=3)  # [B, H, groups, g, F, V], from each group's start
    within = ops.cumprod(d, axis=3)  # decay from the group's start through each chunk

    carry, carried_in = ops.zeros_like(local[:, :, 0, 0]), []
    for k in range(groups):
        carried_in.append(carry)
        carry = within[:, :, k, -1][..., None, None] * carry + local[:, :, k, -1]
    summed = local + within[..., None, None] * ops.stack(carried_in, axis=2)[:, :, :, None]
    summed = ops.reshape(summed, ops.shape(u)[:2] + (groups * size,) + tuple(ops.shape(u)[4:]))
    return ops.cumprod(decay, axis=2), summed[:, :, :length]


def causal_linear_attention(
    q_feat: Any,
    k_feat: Any,
    v: Any,
    state: dict[str, Any],
    *,
    k_log_scale: Any | None = None,
    mask: Any | None = None,
    chunk_size: int = 64,
    normalize: bool = True,
    prefix: str = "",
) -> tuple[Any, dict[str, Any]]:
    """Chunk-wise causal linear attention with a carried state: (out [B, T, H, Dv]
    float32, new state with the same keys).

    Args:
        q_feat, k_feat: [B, T, H, F] query and key features f, g (true key feature
            g * exp(a), `k_log_scale` a [B, T, H] when given).
        v: [B, T, H, Dv] values.
        state: the previous segment's state (`linear_state_spec`, zeros for no
            context), its keys prefixed by `prefix` so one layer can hold several.
        mask: optional bool [B, T]; False keys contribute nothing.
        chunk_size: tokens per chunk; any length works (the last chunk is padded).
        normalize: divide by f . z; False returns the raw sum (TransNormer's)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}.")
    log_scaled = k_log_scale is not None
    has_z = normalize or log_scaled
    f = ops.cast(q_feat, "float32")
    g = ops.cast(k_feat, "float32")
    v = ops.cast(v, "float32")
    batch, length, heads, feat = ops.shape(f)
    value_dim = ops.shape(v)[-1]
    valid = valid_tokens(mask, batch, length, "float32")  # [B, T]
    g = g * valid[:, :, None, None]
    v = v * valid[:, :, None, None]
    s0 = ops.cast(state[prefix + "s"], "float32")  # [B, H, F, Dv]
    if has_z:
        # z is the sum for a value of constant 1: one extra value column gives
        # the numerator and the denominator from the same products.
        v = ops.concatenate([v, valid[:, :, None, None] * ops.ones_like(v[..., :1])], axis=-1)
        s0 = ops.concatenate([s0, ops.cast(state[prefix + "z"], "float32")[..., None]], axis=-1)
    s0 = s0[:, :, None]  # [B, H, 1, F, V] with V = Dv (+ 1)

    # Heads first, then chunks: [B, T, H, X] -> [B, H, n, C, X], the last chunk
    # padded with masked tokens. Every product below is then a batched matmul.
    num_chunks = (length + chunk_size - 1) // chunk_size
    pad = num_chunks * chunk_size - length

    def chunks(x, fill=0.0):
        x = ops.pad(x, [[0, 0], [0, pad]] + [[0, 0]] * (len(x.shape) - 2), constant_values=fill)
        x = ops.reshape(x, (batch, num_chunks, chunk_size) + tuple(ops.shape(x)[2:]))
        return ops.moveaxis(x, 3, 1)

    fc, gc, vc = chunks(f), chunks(g), chunks(v)
    causal = ops.arange(chunk_size)[:, None] >= ops.arange(chunk_size)[None, :]  # [i, j]: j <= i

    # Intra-chunk weights A[b, h, n, i, j] = f_i . g_j (* exp(a_j - m_i)).
    scores = ops.matmul(fc, ops.swapaxes(gc, -1, -2))
    if log_scaled:
        # A state whose z is all zero holds no key yet: its m means nothing, and must not
        # act as a floor under the running maximum.
        empty = ops.sum(ops.abs(state[prefix + "z"]), axis=-1) <= 0.0
        m0 = ops.where(empty, MASKED, ops.cast(state[prefix + "m"], "float32"))  # [B, H]
        a = ops.where(valid[:, :, None] > 0, ops.cast(k_log_scale, "float32"), MASKED)
        ac = chunks(a, MASKED)  # [B, H, n, C]
        # m_i: running maximum of the log-scales up to and including i. It is
        # only a reference point (outputs do not depend on it), hence no gradient.
        flat = ops.reshape(ac, (batch, heads, num_chunks * chunk_size))
        m = _doubling_scan(lambda a, b: (ops.maximum(a[0], b[0]),), (flat,), (MASKED,))[0]
        m = ops.maximum(m, m0[:, :, None])
        mc = ops.stop_gradient(ops.reshape(m, ops.shape(ac)))  # [B, H, n, C]
        rel = ac[:, :, :, None, :] - mc[:, :, :, :, None]  # a_j - m_i
        scores = scores * ops.exp(ops.where(causal, rel, MASKED))
        chunk_end = mc[..., -1]  # M_c: scale of the state after chunk c [B, H, n]
        chunk_start = ops.concatenate([m0[:, :, None], chunk_end[..., :-1]], axis=2)
        # Weight of key j inside its chunk's summary, relative to M_c.
        gc = gc * ops.exp(ac - chunk_end[..., None])[..., None]
    else:
        scores = scores * ops.cast(causal, "float32")

    # Per-chunk summaries, then the state after each chunk (a prefix over chunks).
    update = ops.matmul(ops.swapaxes(gc, -1, -2), vc)  # [B, H, n, F, V]
    if log_scaled:
        carried, summed = _scan_decayed(ops.exp(chunk_start - chunk_end), update)
        after = summed + carried[..., None, None] * s0
    else:
        after = ops.cumsum(update, axis=2) + s0
    # The state before chunk c is the one after chunk c - 1; before chunk 0, the input.
    before = ops.concatenate([s0, after[:, :, :-1]], axis=2)
    inter = ops.matmul(fc, before)  # [B, H, n, C, V]
    if log_scaled:
        # The carried state is relative to M_{c-1}; position i wants m_i.
        inter = inter * ops.exp(chunk_start[..., None] - mc)[..., None]
    num = ops.matmul(scores, vc) + inter
    if normalize:
        den = num[..., -1:]
        # An empty prefix gives 0 / 0: answer 0 there instead of NaN.
        num = num[..., :-1] / ops.where(den > 0.0, den, 1.0)
    elif has_z:
        num = num[..., :-1]
    out = ops.moveaxis(num, 1, 3)  # [B, n, C, H, Dv]
    out = ops.reshape(out, (batch, num_chunks * chunk_size, heads, value_dim))[:, :length]

    final = after[:, :, -1]  # [B, H, F, V]
    if not has_z:
        return out, {prefix + "s": final}
    new_state = {prefix + "s": final[..., :-1], prefix + "z": final[..., -1]}
    if log_scaled:
        new_state[prefix + "m"] = chunk_end[:, :, -1]
    return out, new_state
