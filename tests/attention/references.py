"""Independent float64 references for every attention mechanism, in plain numpy.

Each function is written from the mechanism's equations (the paper, and the state
layout the layer documents), one token or one chunk at a time, and shares no code with
partf: this module imports numpy and nothing else, and receives the layer's weights as
plain arrays (`params`) and its settings as plain values (`config`). A test compares a
layer with its reference on the output, on every entry of the carried state the layer
returns, and on the gradients (the references have none; `helpers.assert_matches_reference`
takes central finite differences of them in float64).

Conventions shared by every function here:

* q, k, v [B, T, H, Dh] (x [B, T, D] for mechanisms that project themselves),
  `mask` bool [B, T] (True for a real token), `state` a dict of arrays laid out as the
  layer documents it; every function returns (output, new state).
* A softmax over no visible entry gives all-zero weights (the query sees nothing).
* Running sums with a log-scale `m` (Performer, Fastformer) are stored relative to
  exp(m), with m the largest log-scale seen so far (-1e30 when nothing was seen), as
  the layers document; the references compute the plain sums and rescale them at the
  end.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Array = np.ndarray
#: The log-scale of a state that holds nothing yet (the layers' documented value).
EMPTY_LOG_SCALE = -1e30


def f64(x: Any) -> Array:
    return np.asarray(x, dtype=np.float64)


def visible_softmax(logits: Array, visible: Array) -> Array:
    """Softmax over the last axis counting only visible entries; zeros if none is."""
    logits = np.where(visible, logits, -np.inf)
    top = np.max(logits, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    weights = np.where(visible, np.exp(logits - top), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    return weights / np.where(total > 0, total, 1.0)


def layer_norm(x: Array, gamma: Array, beta: Array, epsilon: float, axes=(-1,)) -> Array:
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta over `axes`."""
    mean = x.mean(axis=axes, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def dense(x: Array, kernel: Array, bias: Array | None = None) -> Array:
    y = x @ f64(kernel)
    return y if bias is None else y + f64(bias)


# ------------------------------------------------------------------ softmax family
def softmax(config, params, q, k, v, state, mask):
    """Scaled dot-product attention over a memory of the last `mem_len` keys and values
    (Vaswani et al. 2017; the memory as in Transformer-XL): query t sees every valid
    memory slot and the valid segment keys up to t (all of them when not causal)."""
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    mem = config["mem_len"]
    valid = np.asarray(mask, bool)
    if mem:
        k = np.concatenate([f64(state["mem_k"]), k], axis=1)
        v = np.concatenate([f64(state["mem_v"]), v], axis=1)
        valid = np.concatenate([f64(state["mem_valid"]) > 0.5, valid], axis=1)
    out = np.zeros_like(q)
    for b in range(batch):
        for t in range(length):
            stop = mem + t + 1 if config["causal"] else mem + length
            logits = np.einsum("hd,jhd->hj", q[b, t], k[b, :stop]) / math.sqrt(dim)
            weights = visible_softmax(logits, valid[b, None, :stop])
            out[b, t] = np.einsum("hj,jhd->hd", weights, v[b, :stop])
    if not mem:
        return out, {}
    new_state = {
        "mem_k": k[:, -mem:],
        "mem_v": v[:, -mem:],
        "mem_valid": valid[:, -mem:].astype(np.float64),
    }
    return out, new_state


def local(config, params, q, k, v, state, mask):
    """Sliding-window attention: query t sees itself and the `window_size` tokens before
    it, the earliest of which may come from the state (the last W tokens seen)."""
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    window = config["window_size"]
    keys = np.concatenate([f64(state["win_k"]), k], axis=1)  # token t sits at W + t
    values = np.concatenate([f64(state["win_v"]), v], axis=1)
    valid = np.concatenate([f64(state["win_valid"]) > 0.5, np.asarray(mask, bool)], axis=1)
    out = np.zeros_like(q)
    for b in range(batch):
        for t in range(length):
            part = slice(t, window + t + 1)
            logits = np.einsum("hd,jhd->hj", q[b, t], keys[b, part]) / math.sqrt(dim)
            weights = visible_softmax(logits, valid[b, None, part])
            out[b, t] = np.einsum("hj,jhd->hd", weights, values[b, part])
    new_state = {
        "win_k": keys[:, -window:],
        "win_v": values[:, -window:],
        "win_valid": valid[:, -window:].astype(np.float64),
    }
    return out, new_state


def _open_window(state, b: int, q, k, v, mask, names=("buf_q", "buf_k", "buf_v")):
    """The open window's carried tokens, then the segment's, for example b.

    Returns (offset, [Q], K, V, valid), position p counted from the window's start;
    Q is None when the state keeps no queries.
    """
    offset = int(state["offset"][b])
    parts = []
    for name, x in zip(names, (q, k, v), strict=True):
        parts.append(None if name is None else np.concatenate([f64(state[name][b, :offset]), x[b]]))
    valid = np.concatenate([f64(state["buf_valid"][b, :offset]) > 0.5, np.asarray(mask[b], bool)])
    return offset, parts, valid


def _left_aligned(x: Array, start: int, stop: int, size: int) -> Array:
    """x[start:stop] in the first slots of `size` zero slots."""
    buffer = np.zeros((size, *x.shape[1:]))
    buffer[: stop - start] = x[start:stop]
    return buffer


def _normalized(config, params, out: Array) -> Array:
    """TransNormer's output normalisation over all heads of a token.

    simple_rms divides each token's output by its root mean square over every head and
    feature. `rms_form` "authors" is TransNormer's released SimpleRMSNorm, with 1e-8
    added to the root: x / (sqrt(sum x^2 / n) + 1e-8); "partf" is partf's first form,
    1e-6 added to the mean square under the root: x / sqrt(sum x^2 / n + 1e-6).
    """
    if config["norm_type"] == "simple_rms":
        count = out.shape[-2] * out.shape[-1]
        square_sum = np.sum(out * out, axis=(-2, -1), keepdims=True)
        if config["rms_form"] == "authors":
            return out / (np.sqrt(square_sum / count) + 1e-8)
        return out / np.sqrt(square_sum / count + 1e-6)
    if config["norm_type"] == "layer":
        return layer_norm(
            out,
            f64(params["norm_gamma"]),
            f64(params["norm_beta"]),
            config["norm_epsilon"],
            (-2, -1),
        )
    return out


def diag(config, params, q, k, v, state, mask):
    """TransNormer's DiagAttention: blocks of `window_size` tokens at fixed stream
    positions 0, W, 2W, ...; query p sees the valid keys j <= p of its own block, with
    softmax or relu scores, then the output normalisation. The open block's first
    tokens come from the state."""
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    window = config["window_size"]
    out = np.zeros_like(q)
    new = {name: [] for name in ("buf_k", "buf_v", "buf_valid", "offset")}
    for b in range(batch):
        offset, (_, keys, values), valid = _open_window(
            state, b, q, k, v, mask, names=(None, "buf_k", "buf_v")
        )
        for t in range(length):
            p = offset + t
            start = (p // window) * window
            logits = np.einsum("hd,jhd->hj", q[b, t], keys[start : p + 1]) / math.sqrt(dim)
            visible = valid[None, start : p + 1]
            if config["diag_activation"] == "softmax":
                weights = visible_softmax(logits, visible)
            else:
                weights = np.maximum(logits, 0.0) * visible
            out[b, t] = np.einsum("hj,jhd->hd", weights, values[start : p + 1])
        end = offset + length
        start = end - end % window
        new["buf_k"].append(_left_aligned(keys, start, end, window))
        new["buf_v"].append(_left_aligned(values, start, end, window))
        new["buf_valid"].append(_left_aligned(valid.astype(np.float64), start, end, window))
        new["offset"].append(end % window)
    new_state = {name: np.stack(parts) for name, parts in new.items()}
    new_state["offset"] = new_state["offset"].astype(np.int32)
    return _normalized(config, params, out), new_state


# ---------------------------------------------------------------- linear family
def linear_kernel(f, g, v, state, mask, normalize=True, log_scale=None, prefix=""):
    """Causal linear attention written as its recurrence over tokens:

        S_i = S_{i-1} + G_i v_i^T,   z_i = z_{i-1} + G_i,   out_i = f_i S_i / (f_i . z_i)

    with key features G_i = g_i * exp(a_i) when log-scales a are given (out_i = f_i S_i
    when not normalising; 0 where the denominator is 0). Masked tokens add nothing.
    The state holds S and z (relative to exp(m) when log-scaled).
    """
    f, g, v = f64(f), f64(g), f64(v)
    batch, length, heads, _ = f.shape
    valid = np.asarray(mask, bool)
    scaled = log_scale is not None
    s = f64(state[prefix + "s"]).copy()  # [B, H, F, Dv]
    z = f64(state[prefix + "z"]).copy() if (normalize or scaled) else None
    top = np.full((batch, heads), EMPTY_LOG_SCALE)
    if scaled:
        # A state whose z is all zero holds nothing: its m means nothing either.
        has = np.abs(z).sum(axis=-1) > 0
        m0 = f64(state[prefix + "m"])
        top = np.where(has, m0, EMPTY_LOG_SCALE)
        s = np.where(has[..., None, None], s * np.exp(np.where(has, m0, 0.0))[..., None, None], 0)
        z = np.where(has[..., None], z * np.exp(np.where(has, m0, 0.0))[..., None], 0.0)
        g = g * np.exp(f64(log_scale))[..., None]
    out = np.zeros(v.shape)
    for t in range(length):
        live = valid[:, t, None, None, None]
        s = s + np.where(live, np.einsum("bhf,bhd->bhfd", g[:, t], v[:, t]), 0.0)
        if z is not None:
            z = z + np.where(valid[:, t, None, None], g[:, t], 0.0)
        if scaled:
            top = np.where(valid[:, t, None], np.maximum(top, f64(log_scale)[:, t]), top)
        num = np.einsum("bhf,bhfd->bhd", f[:, t], s)
        if normalize:
            den = np.einsum("bhf,bhf->bh", f[:, t], z)[..., None]
            num = num / np.where(den > 0, den, 1.0) * (den > 0)
        out[:, t] = num
    new_state = {prefix + "s": s}
    if z is not None:
        new_state[prefix + "z"] = z
    if scaled:
        rescale = np.where(top > EMPTY_LOG_SCALE, np.exp(-np.maximum(top, -700.0)), 0.0)
        new_state[prefix + "s"] = s * rescale[..., None, None]
        new_state[prefix + "z"] = z * rescale[..., None]
        new_state[prefix + "m"] = top
    return out, new_state


def elu(x: Array) -> Array:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


def linear(config, params, q, k, v, state, mask):
    """Katharopoulos et al. 2020: phi(x) = elu(x) + 1."""
    return linear_kernel(elu(f64(q)) + 1.0, elu(f64(k)) + 1.0, v, state, mask)


def norm(config, params, q, k, v, state, mask):
    """TransNormer's NormAttention: the linear-attention sum without its denominator,
    then the output normalisation."""
    phi = {"elu": elu, "elu+1": lambda x: elu(x) + 1.0, "relu": lambda x: np.maximum(x, 0.0)}[
        config["feature_map"]
    ]
    out, new_state = linear_kernel(phi(f64(q)), phi(f64(k)), v, state, mask, normalize=False)
    return _normalized(config, params, out), new_state


def favor_log_features(x: Array, projection: Array) -> Array:
    """log phi(x) of FAVOR+ up to a constant: w . x' - |x'|^2 / 2, x' = x / Dh^(1/4)."""
    x = f64(x) / f64(x).shape[-1] ** 0.25
    equation = "bthd,hfd->bthf" if projection.ndim == 3 else "bthd,bhfd->bthf"
    return np.einsum(equation, x, f64(projection)) - 0.5 * (x**2).sum(-1, keepdims=True)


def performer(config, params, q, k, v, state, mask, fresh=None):
    """Choromanski et al. 2021: positive random features phi(x) = exp(w . x' - |x'|^2/2)
    (the 1/sqrt(F) factor cancels), causal linear attention over them. The log-scale of
    key j is its largest log-feature. With `redraw`, each example keeps its own rows in
    the state; an example whose state is empty takes `fresh` rows (training) or the
    layer's own (evaluation)."""
    projection = f64(params["projection"])
    if config["redraw"]:
        empty = np.abs(f64(state["z"])).sum(axis=(1, 2)) <= 0
        start = projection if fresh is None else f64(fresh)
        projection = np.where(empty[:, None, None, None], start[None], f64(state["projection"]))
    q_log = favor_log_features(q, projection)
    k_log = favor_log_features(k, projection)
    a = k_log.max(axis=-1)
    g = np.exp(k_log - a[..., None])
    f = np.exp(q_log)
    core = {name: state[name] for name in ("s", "z", "m")}
    out, new_state = linear_kernel(f, g, v, core, mask, log_scale=a)
    if config["redraw"]:
        new_state["projection"] = projection
    return out, new_state


def fastformer(config, params, q, k, v, state, mask):
    """Causal Fastformer (Wu et al. 2021; causal form of the additive-attention seed):
    g_i = sum_{j<=i} exp(a_j) x_j / sum_{j<=i} exp(a_j) pools the queries
    (a = q . w_q / sqrt(Dh)) into a global query, p = g_q * k, pools p the same way
    (w_k), u = g_k * v, and the output is the transform W u plus the query."""
    q, k, v = f64(q), f64(k), f64(v)
    scale = 1.0 / math.sqrt(q.shape[-1])
    ones = np.ones(q.shape[:-1] + (1,))
    mask = np.asarray(mask, bool)

    def pool(x, logits, prefix):
        sub = {name: state[prefix + name] for name in ("s", "z", "m")}
        pooled, new = linear_kernel(ones, ones, x, sub, mask, log_scale=logits)
        return pooled, {prefix + name: value for name, value in new.items()}

    query_logits = np.einsum("bthd,hd->bth", q, f64(params["query_pool"])) * scale
    global_q, q_state = pool(q, query_logits, "q_")
    mixed = global_q * k
    key_logits = np.einsum("bthd,hd->bth", mixed, f64(params["key_pool"])) * scale
    global_k, k_state = pool(mixed, key_logits, "k_")
    u = global_k * v
    out = np.einsum("bthk,hkgj->btgj", u, f64(params["transform_kernel"]))
    if "transform_bias" in params:
        out = out + f64(params["transform_bias"])
    return out + q, {**q_state, **k_state}


def fastformer_seed_convolution(params, x, mask, groups: int) -> Array:
    """The additive-attention seed's causal convolution branch, over one whole stream.

    Each token's features are layer-normed over the width (mean and variance of its D
    features, epsilon 1e-5, then gamma and beta); a pad is replaced by zeros. Output
    t is sum over taps i < K of n_{t - K + 1 + i} W_i, where n_s is zero before the
    stream and W_i maps each of the `groups` channel groups to itself only (kernel
    [K, G, D / G, D / G]); no bias, no activation.
    """
    x = f64(x)
    batch, length, width = x.shape
    kernel = f64(params["conv_kernel"])
    taps, size = kernel.shape[0], width // groups
    normed = layer_norm(x, f64(params["norm_gamma"]), f64(params["norm_beta"]), 1e-5)
    normed = np.where(np.asarray(mask, bool)[..., None], normed, 0.0)
    out = np.zeros_like(x)
    for t in range(length):
        for i in range(taps):
            s = t - taps + 1 + i
            if s < 0:
                continue
            for g in range(groups):
                part = slice(g * size, (g + 1) * size)
                out[:, t, part] += normed[:, s, part] @ kernel[i, g]
    return out


def primal(config, params, x, state, mask):
    """Primal-Attention (Chen et al. 2023), causal: e_i = phi(mean_{j<=i} q_j) W_e,
    r_i = phi(mean_{j<=i} k_j) W_r with phi(x) = x / |x|, output [e, r] W_c per head,
    then the output projection. Also returns the KSVD regulariser eta * J as "loss",
    J = mean over the batch of (E(e) + E(r) - Tr(mean_h W_e^T W_r))^2 with
    E(s) = mean over heads and valid tokens of |s Lambda|^2 / 2."""
    x = f64(x)
    batch, length, _ = x.shape
    heads, dim, rank = params["w_e"].shape
    valid = np.asarray(mask, bool)

    def project(name):
        y = np.einsum("btd,dhk->bthk", x, f64(params[f"{name}_kernel"]))
        if f"{name}_bias" in params:
            y = y + f64(params[f"{name}_bias"])
        return y * valid[:, :, None, None]

    q, k = project("query"), project("key")
    sum_q, sum_k = f64(state["sum_q"]).copy(), f64(state["sum_k"]).copy()
    e = np.zeros((batch, length, heads, rank))
    r = np.zeros_like(e)
    for t in range(length):
        sum_q, sum_k = sum_q + q[:, t], sum_k + k[:, t]
        # The running mean and the running sum have the same direction.
        unit_q = sum_q / np.maximum(np.linalg.norm(sum_q, axis=-1, keepdims=True), 1e-12)
        unit_k = sum_k / np.maximum(np.linalg.norm(sum_k, axis=-1, keepdims=True), 1e-12)
        e[:, t] = np.einsum("bhd,hds->bhs", unit_q, f64(params["w_e"]))
        r[:, t] = np.einsum("bhd,hds->bhs", unit_k, f64(params["w_r"]))
    combined = dense(
        np.concatenate([e, r], axis=-1), params["combine_kernel"], params["combine_bias"]
    )
    y = np.einsum("bthk,hkd->btd", combined, f64(params["output_kernel"]))
    if "output_bias" in params:
        y = y + f64(params["output_bias"])

    lam = f64(params["lambda"])  # [H, s]
    tokens = valid.sum(axis=1) * heads

    def energy(scores):
        per_token = ((scores * lam) ** 2).sum(axis=(2, 3)) * valid
        return per_token.sum(axis=1) / np.maximum(tokens, heads) / 2.0

    trace = sum(np.trace(f64(params["w_e"])[h].T @ f64(params["w_r"])[h]) for h in range(heads))
    loss = config["eta"] * np.mean((energy(e) + energy(r) - trace / heads) ** 2)
    return {"y": y, "loss": loss}, {"sum_q": sum_q, "sum_k": sum_k}


# ------------------------------------------------------------ random-feature family
def projection_net(params, prefix: str, x: Array, epsilon: float) -> Array:
    """EVA's and LARA's adaptive proposal map: a linear layer then a layer norm over
    the head width."""
    y = dense(x, params[f"{prefix}_kernel"], params[f"{prefix}_bias"])
    return layer_norm(y, f64(params[f"{prefix}_gamma"]), f64(params[f"{prefix}_beta"]), epsilon)


def eva(config, params, q, k, v, state, mask, noise=None):
    """Causal EVA (Zheng et al. 2023) with the bounded memory partf documents.

    Window w of W tokens (at stream positions wW .. wW + W - 1) is attended exactly.
    Every chunk c of C tokens before it is summarised by

        mu_c = f_q(mean q) + f_k(mean k),  omega_c = mu_c (+ N(0, I) noise in training)
        key_c = f_k(mean k)
        beta_c = sum_{j in c} softmax_j((omega_c . k_j - |k_j|^2 / 2) / sqrt(Dh)) v_j

    (means over the chunk's valid tokens), and a query of window w also sees, through
    one logit q . key_c / sqrt(Dh) and value beta_c each, the `mem_chunks` chunks just
    before its window. With `chunk_mask` "authors" (the authors' causal mask: a query
    sees every chunk before its own) it also sees the chunks of its own window before
    the chunk it lies in, whose tokens it sees exactly too. All logits share one softmax.

    The state: the open window's first tokens (queries, keys, values, validity,
    `offset` of them) and the summaries of the `mem_chunks` chunks before the open
    window (`mem_k`, `mem_v`, `mem_valid`). `noise[b, c]` [H, Dh] is the draw for chunk c
    counted from the open window's first token.
    """
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    window, chunk, memory = config["window_size"], config["chunk_size"], config["mem_chunks"]
    eps = config["epsilon"]
    scale = 1.0 / math.sqrt(dim)
    out = np.zeros_like(q)
    names = ("buf_q", "buf_k", "buf_v", "buf_valid", "offset", "mem_k", "mem_v", "mem_valid")
    new = {name: [] for name in names}
    for b in range(batch):
        offset, (queries, keys, values), valid = _open_window(state, b, q, k, v, mask)
        end = offset + length
        summaries = {}  # chunk index from the open window's start -> (key, beta, used)
        for c in range(-memory, 0):
            summaries[c] = (
                f64(state["mem_k"][b, c + memory]),
                f64(state["mem_v"][b, c + memory]),
                f64(state["mem_valid"][b, c + memory]) > 0.5,
            )
        for c in range(-(-end // chunk)):
            members = [p for p in range(c * chunk, min((c + 1) * chunk, end)) if valid[p]]
            mean_q = queries[members].mean(axis=0) if members else np.zeros((heads, dim))
            mean_k = keys[members].mean(axis=0) if members else np.zeros((heads, dim))
            key = projection_net(params, "fk", mean_k, eps)
            omega = projection_net(params, "fq", mean_q, eps) + key
            if noise is not None:
                omega = omega + f64(noise[b, c])
            beta = np.zeros((heads, dim))
            if members:
                chunk_keys = keys[members]  # [n, H, Dh]
                log_w = np.einsum("nhd,hd->hn", chunk_keys, omega)
                log_w = (log_w - 0.5 * (chunk_keys**2).sum(-1).T) * scale
                beta = np.einsum("hn,nhd->hd", visible_softmax(log_w, True), values[members])
            summaries[c] = (key, beta, bool(members))
        for t in range(length):
            p = offset + t
            start = (p // window) * window
            exact = [j for j in range(start, p + 1) if valid[j]]
            last = start // chunk  # the first chunk the query's window holds
            if config.get("chunk_mask", "partf") == "authors" and memory:
                last = p // chunk  # the chunk the query lies in
            before = [c for c in range(start // chunk - memory, last) if summaries[c][2]]
            logits = [np.einsum("hd,jhd->hj", q[b, t], keys[exact]) * scale]
            vals = [values[exact]]  # [j, H, Dh]
            if before:
                chunk_keys = np.stack([summaries[c][0] for c in before])
                logits.append(np.einsum("hd,chd->hc", q[b, t], chunk_keys) * scale)
                vals.append(np.stack([summaries[c][1] for c in before]))
            logits = np.concatenate(logits, axis=1)
            if logits.shape[1]:  # a query that sees nothing gives zeros
                weights = visible_softmax(logits, True)
                out[b, t] = np.einsum("hj,jhd->hd", weights, np.concatenate(vals))
        start = end - end % window
        new["buf_q"].append(_left_aligned(queries, start, end, window))
        new["buf_k"].append(_left_aligned(keys, start, end, window))
        new["buf_v"].append(_left_aligned(values, start, end, window))
        new["buf_valid"].append(_left_aligned(valid.astype(np.float64), start, end, window))
        new["offset"].append(end % window)
        if memory:
            kept = range(start // chunk - memory, start // chunk)
            new["mem_k"].append(np.stack([summaries[c][0] for c in kept]))
            new["mem_v"].append(np.stack([summaries[c][1] for c in kept]))
            new["mem_valid"].append(np.array([float(summaries[c][2]) for c in kept]))
    new_state = {name: np.stack(parts) for name, parts in new.items() if parts}
    new_state["offset"] = new_state["offset"].astype(np.int32)
    return out, new_state


def lara(config, params, q, k, v, state, mask, noise=None):
    """Non-causal LARA (Zheng et al. 2022), one example and head at a time.

    Landmark c is the contiguous segment of tokens t with floor(t C / T) = c; its
    proposal is N(mu_c, I), mu_c = mean f_q(q) + mean f_k(k) over its valid tokens,
    sampled as omega_c = mu_c (+ noise[b, c] in training). With
    log p_c(x) = (omega_c . x - |x|^2 / 2) / sqrt(Dh):

        kv_c    = sum_m softmax_m(log p_c(k_m)) v_m
        log r_c = log alpha_c + log p_c(q_n) + logsumexp_m log p_c(k_m) - log p_c(mu_c)
        out_n   = sum_c softmax_c(log r_c) kv_c

    alpha_c = p_c(mu_c) / sum_e p_c(mu_e) (the layer's balance term) plus
    alpha_coeff * (t_c - mean_c t_c), t_c = softmax over the valid queries of
    q_bar_c . q_n / sqrt(Dh); empty landmarks take no part.
    """
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    count = config["num_landmarks"]
    eps = config["epsilon"]
    scale = 1.0 / math.sqrt(dim)
    landmark = [(t * count) // length for t in range(length)]
    out = np.zeros_like(q)

    def logsumexp(x):
        top = x.max()
        return top + np.log(np.exp(x - top).sum())

    for b in range(batch):
        valid = [t for t in range(length) if mask[b, t]]
        members = [[t for t in valid if landmark[t] == c] for c in range(count)]
        used = [c for c in range(count) if members[c]]
        fq = projection_net(params, "fq", q[b], eps)  # [T, H, Dh]
        fk = projection_net(params, "fk", k[b], eps)
        for h in range(heads):
            q_bar = {c: fq[members[c], h].mean(axis=0) for c in used}
            mu = {c: q_bar[c] + fk[members[c], h].mean(axis=0) for c in used}
            omega = {c: mu[c] + (0.0 if noise is None else f64(noise[b, c, h])) for c in used}

            def log_p(c, x, omega=omega):
                return (x @ omega[c] - 0.5 * (x * x).sum(-1)) * scale

            keys, vals = k[b, valid, h], v[b, valid, h]
            kv = {c: visible_softmax(log_p(c, keys), True) @ vals for c in used}
            lse = {c: logsumexp(log_p(c, keys)) for c in used}
            own = {c: log_p(c, mu[c][None])[0] for c in used}
            balance = {
                c: np.exp(own[c] - logsumexp(np.array([log_p(c, mu[e][None])[0] for e in used])))
                for c in used
            }
            real = np.asarray(mask[b], bool)
            t_c = {c: visible_softmax((q[b, :, h] @ q_bar[c]) * scale, real) for c in used}
            t_mean = sum(t_c.values()) / len(used)
            log_r = np.stack(
                [
                    np.log(np.maximum(balance[c] + config["alpha_coeff"] * (t_c[c] - t_mean), 1e-8))
                    + log_p(c, q[b, :, h])
                    + lse[c]
                    - own[c]
                    for c in used
                ]
            )  # [used, T]
            weights = visible_softmax(log_r.T, True)  # [T, used]
            out[b, :, h] = weights @ np.stack([kv[c] for c in used])
    return out, {}


# ------------------------------------------------------------------------- rotary
def rotate_reference(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Each pair (x_k, x_{k + D/2}) at position p times the 2x2 rotation by
    p / 10000^(2k / D), one token, head and pair at a time."""
    x = f64(x)
    out = np.empty_like(x)
    batch, length, heads, dim = x.shape
    half = dim // 2
    for b in range(batch):
        for t in range(length):
            for k in range(half):
                angle = float(positions[b, t]) / 10000.0 ** (2.0 * k / dim)
                rotation = np.array(
                    [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]]
                )
                for h in range(heads):
                    pair = rotation @ np.array([x[b, t, h, k], x[b, t, h, k + half]])
                    out[b, t, h, k], out[b, t, h, k + half] = pair
    return out


# ------------------------------------------------------------------------ relative
def sinusoid(distances: Array, width: int) -> Array:
    """Transformer-XL's encoding of a distance d: [sin(d f_k), cos(d f_k)], with
    frequencies f_k = 10000^(-2k / width), k = 0 .. width/2 - 1."""
    half = (width + 1) // 2
    frequencies = 10000.0 ** (-2.0 * np.arange(half) / width)
    angles = f64(distances)[:, None] * frequencies[None]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)[:, :width]


def relative(config, params, x, state, mask):
    """Transformer-XL relative attention (Dai et al. 2019, section 3.3), pair by pair:
    for query i (after M memory rows) and key j of [memory; segment], at distance
    d = M + i - j (clamped to clamp_len),

        score = ((q_i + u) . k_j + (q_i + v) . W_r R_d) / sqrt(Dh)

    (divided by Dh instead, with a ReLU after the output projection, when
    config["compat"] is "original": the original PAR project's choices)
    over the valid keys (and j <= M + i when causal); keys and values are projections
    of [memory; x]. The new memory is the last M rows of [memory; x] and their validity.
    """
    x = f64(x)
    batch, length, width = x.shape
    memory_len = config["mem_len"]
    valid = np.asarray(mask, bool)
    context = x
    if memory_len:
        context = np.concatenate([f64(state["memory"]), x], axis=1)
        valid = np.concatenate([np.asarray(state["memory_mask"]) != 0, valid], axis=1)

    def project(name, inputs):
        y = np.einsum("btd,dhk->bthk", inputs, f64(params[f"{name}_kernel"]))
        return y + f64(params[f"{name}_bias"]) if f"{name}_bias" in params else y

    q, k, v = project("query", x), project("key", context), project("value", context)
    heads, dim = q.shape[2:]
    keys = context.shape[1]
    clamp = config["clamp_len"]
    out = np.zeros(q.shape)
    for i in range(length):
        distances = memory_len + i - np.arange(keys)
        if clamp is not None:
            distances = np.clip(distances, -clamp, clamp)
        position = np.einsum(
            "jd,dhk->jhk", sinusoid(distances, width), f64(params["position_kernel"])
        )
        for b in range(batch):
            content = np.einsum("hk,jhk->hj", q[b, i] + f64(params["content_bias"]), k[b])
            positional = np.einsum("hk,jhk->hj", q[b, i] + f64(params["position_bias"]), position)
            visible = valid[b].copy()
            if config["causal"]:
                visible[memory_len + i + 1 :] = False
            scale = dim if config.get("compat") == "original" else math.sqrt(dim)
            weights = visible_softmax((content + positional) / scale, visible[None])
            out[b, i] = np.einsum("hj,jhk->hk", weights, v[b])
    y = np.einsum("bthk,hkd->btd", out, f64(params["output_kernel"]))
    if "output_bias" in params:
        y = y + f64(params["output_bias"])
    if config.get("compat") == "original":
        y = np.maximum(y, 0.0)
    if not memory_len:
        return y, {}
    return y, {
        "memory": context[:, -memory_len:],
        "memory_mask": valid[:, -memory_len:].astype(np.int32),
    }


#: Registered mechanism -> its reference here.
REFERENCES = {
    "relative": relative,
    "softmax": softmax,
    "local": local,
    "linear": linear,
    "performer": performer,
    "fastformer": fastformer,
    "norm": norm,
    "diag": diag,
    "primal": primal,
    "eva": eva,
    "lara": lara,
}


# ------------------------------------------------------------------ non-causal forms
# One whole sequence per call, no state: each function returns (output, {}). Written as
# the explicit quadratic form, every query against every key it may see, one query at a
# time; `mask[b, j]` False means key j counts for nothing.


def _weighted_mean(weights: Array, values: Array) -> Array:
    """sum_j w_j v_j / sum_j w_j per head: weights [H, T], values [T, H, D]; 0 if no weight."""
    num = np.einsum("hj,jhd->hd", weights, values)
    den = weights.sum(axis=-1)[:, None]
    return num / np.where(den > 0, den, 1.0)


def softmax_noncausal(config, params, q, k, v, state, mask):
    """Every query against every real key, scaled dot-product softmax."""
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    out = np.zeros_like(q)
    for b in range(batch):
        for t in range(length):
            logits = np.einsum("hd,jhd->hj", q[b, t], k[b]) / math.sqrt(dim)
            out[b, t] = np.einsum("hj,jhd->hd", visible_softmax(logits, mask[b][None]), v[b])
    return out, {}


def _kernel_noncausal(f: Array, g: Array, v: Array, mask, normalize: bool = True) -> Array:
    """out_i = sum_j m_j (f_i . g_j) v_j, divided by sum_j m_j (f_i . g_j) if normalising."""
    v = f64(v)
    batch, length = f.shape[:2]
    out = np.zeros(f.shape[:3] + v.shape[-1:])
    for b in range(batch):
        for t in range(length):
            scores = np.einsum("hf,jhf->hj", f[b, t], g[b]) * np.asarray(mask[b], float)[None]
            if normalize:
                out[b, t] = _weighted_mean(scores, v[b])
            else:
                out[b, t] = np.einsum("hj,jhd->hd", scores, v[b])
    return out


def linear_noncausal(config, params, q, k, v, state, mask):
    """Katharopoulos et al. 2020 without the causal mask: phi(x) = elu(x) + 1."""
    return _kernel_noncausal(elu(f64(q)) + 1.0, elu(f64(k)) + 1.0, v, mask), {}


def norm_noncausal(config, params, q, k, v, state, mask):
    """TransNormer's NormAttention over the whole sequence: phi(Q) phi(K)^T V without a
    denominator, then the output normalisation."""
    phi = {"elu": elu, "elu+1": lambda x: elu(x) + 1.0, "relu": lambda x: np.maximum(x, 0.0)}[
        config["feature_map"]
    ]
    out = _kernel_noncausal(phi(f64(q)), phi(f64(k)), v, mask, normalize=False)
    return _normalized(config, params, out), {}


def performer_noncausal(config, params, q, k, v, state, mask):
    """FAVOR+ (Choromanski et al. 2021) without the causal mask: positive random features
    phi(x)_r = exp(w_r . x' - |x'|^2 / 2), x' = x / Dh^(1/4), in float64 directly."""
    projection = f64(params["projection"])

    def phi(x):
        x = f64(x) / f64(x).shape[-1] ** 0.25
        return np.exp(np.einsum("bthd,hfd->bthf", x, projection) - 0.5 * (x**2).sum(-1)[..., None])

    return _kernel_noncausal(phi(q), phi(k), v, mask), {}


def local_noncausal(config, params, q, k, v, state, mask):
    """Sliding-window softmax on both sides: query i sees the real keys j, |i - j| <= W."""
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    window = config["window_size"]
    out = np.zeros_like(q)
    positions = np.arange(length)
    for b in range(batch):
        for t in range(length):
            visible = (np.abs(positions - t) <= window) & np.asarray(mask[b], bool)
            logits = np.einsum("hd,jhd->hj", q[b, t], k[b]) / math.sqrt(dim)
            out[b, t] = np.einsum("hj,jhd->hd", visible_softmax(logits, visible[None]), v[b])
    return out, {}


def diag_noncausal(config, params, q, k, v, state, mask):
    """TransNormer's DiagAttention without the causal mask: query i sees the real keys of
    its block (positions floor(i / W) * W up to the next multiple of W), softmax or relu
    scores, then the output normalisation."""
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    window = config["window_size"]
    out = np.zeros_like(q)
    block = np.arange(length) // window
    for b in range(batch):
        for t in range(length):
            visible = (block == block[t]) & np.asarray(mask[b], bool)
            logits = np.einsum("hd,jhd->hj", q[b, t], k[b]) / math.sqrt(dim)
            if config["diag_activation"] == "softmax":
                weights = visible_softmax(logits, visible[None])
            else:
                weights = np.where(visible[None], np.maximum(logits, 0.0), 0.0)
            out[b, t] = np.einsum("hj,jhd->hd", weights, v[b])
    return _normalized(config, params, out), {}


def fastformer_noncausal(config, params, q, k, v, state, mask):
    """Fastformer as published (Wu et al. 2021): alpha = softmax over the real tokens of
    q . w_q / sqrt(Dh) pools the queries into one global query g_q; p = g_q * k is pooled
    the same way (w_k) into g_k; u = g_k * v; the output is W u plus the query."""
    q, k, v = f64(q), f64(k), f64(v)
    scale = 1.0 / math.sqrt(q.shape[-1])
    visible = np.asarray(mask, bool)  # [B, T]

    def pool(x, w):  # one global vector per example and head: [B, 1, H, Dh]
        logits = np.einsum("bthd,hd->bht", x, f64(w)) * scale
        alpha = visible_softmax(logits, visible[:, None, :])  # [B, H, T]
        return np.einsum("bht,bthd->bhd", alpha, x)[:, None]

    global_q = pool(q, params["query_pool"])
    mixed = global_q * k
    global_k = pool(mixed, params["key_pool"])
    u = global_k * v
    out = np.einsum("bthk,hkgj->btgj", u, f64(params["transform_kernel"]))
    if "transform_bias" in params:
        out = out + f64(params["transform_bias"])
    return out + q, {}


def eva_noncausal(config, params, q, k, v, state, mask, noise=None):
    """EVA's encoder form (Zheng et al. 2023): query i of window w (positions wW ..
    wW + W - 1) sees every real token of window w exactly, and every chunk c of C
    tokens outside window w through one logit q . key_c / sqrt(Dh) and value beta_c,

        mu_c = f_q(mean q) + f_k(mean k),  omega_c = mu_c (+ noise[b, c] in training)
        key_c = f_k(mean k),  beta_c = sum_{j in c} softmax_j((omega_c . k_j - |k_j|^2 / 2)
        / sqrt(Dh)) v_j

    (means over the chunk's real tokens; a chunk with none is not seen). All logits
    share one softmax. Chunks count from the sequence's first token."""
    q, k, v = f64(q), f64(k), f64(v)
    batch, length, heads, dim = q.shape
    window, chunk, eps = config["window_size"], config["chunk_size"], config["epsilon"]
    scale = 1.0 / math.sqrt(dim)
    out = np.zeros_like(q)
    for b in range(batch):
        valid = np.asarray(mask[b], bool)
        summaries = []  # (first position, key, beta) of the chunks holding a real token
        for start in range(0, length, chunk):
            members = [p for p in range(start, min(start + chunk, length)) if valid[p]]
            if not members:
                continue
            key = projection_net(params, "fk", k[b, members].mean(axis=0), eps)
            omega = projection_net(params, "fq", q[b, members].mean(axis=0), eps) + key
            if noise is not None:
                omega = omega + f64(noise[b, start // chunk])
            log_w = np.einsum("nhd,hd->hn", k[b, members], omega)
            log_w = (log_w - 0.5 * (k[b, members] ** 2).sum(-1).T) * scale
            beta = np.einsum("hn,nhd->hd", visible_softmax(log_w, True), v[b, members])
            summaries.append((start, key, beta))
        for t in range(length):
            first = (t // window) * window
            exact = [j for j in range(first, min(first + window, length)) if valid[j]]
            remote = [s for s in summaries if not first <= s[0] < first + window]
            logits = [np.einsum("hd,jhd->hj", q[b, t], k[b, exact]) * scale]
            values = [v[b, exact]]
            if remote:
                remote_keys = np.stack([s[1] for s in remote])
                logits.append(np.einsum("hd,chd->hc", q[b, t], remote_keys) * scale)
                values.append(np.stack([s[2] for s in remote]))
            logits = np.concatenate(logits, axis=1)
            if logits.shape[1]:
                weights = visible_softmax(logits, True)
                out[b, t] = np.einsum("hj,jhd->hd", weights, np.concatenate(values))
    return out, {}


NONCAUSAL_REFERENCES = {
    "eva": eva_noncausal,
    "softmax": softmax_noncausal,
    "linear": linear_noncausal,
    "norm": norm_noncausal,
    "performer": performer_noncausal,
    "local": local_noncausal,
    "diag": diag_noncausal,
    "fastformer": fastformer_noncausal,
}
