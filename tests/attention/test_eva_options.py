"""EVA's options from the authors' causal model: `overlap_window`, `adaptive_proj` and
`use_t5_rpe`, against a token-by-token float64 reference written from their definitions
(evaluation mode: the proposal is mu_c itself)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from partf.attention import create_attention
from partf.attention.eva import EVAAttention, t5_buckets
from tests.attention.helpers import (
    assert_causal,
    assert_segments_equal_one_call,
    random_heads,
    random_tokens,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


def bucket(n: int, num_buckets: int, max_distance: int) -> int:
    """T5's causal bucket of one distance: exact below half the buckets, log-spaced above."""
    exact = num_buckets // 2
    if n < exact:
        return n
    far = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return min(far, num_buckets - 1)


def test_t5_buckets_follow_the_definition():
    distances = np.arange(0, 300)
    for num_buckets, max_distance in ((16, 64), (32, 128), (16, 16)):
        got = t5_buckets(distances, num_buckets, max_distance)
        want = [bucket(int(n), num_buckets, max_distance) for n in distances]
        assert got.tolist() == want
    assert t5_buckets(np.array([0, 1, 7, 8, 16, 100]), 16, 64).tolist() == [0, 1, 7, 8, 10, 15]


def make_layer(
    overlap: bool, proj: str, rpe: bool, window=4, chunk=2, mem=2, seed=0, chunk_mask=None
):
    """An EVA layer with these options; `chunk_mask` None leaves it at its default."""
    mask_option = {} if chunk_mask is None else {"chunk_mask": chunk_mask}
    layer = create_attention(
        "eva",
        8,
        2,
        window_size=window,
        chunk_size=chunk,
        mem_chunks=mem,
        overlap_window=overlap,
        adaptive_proj=proj,
        use_t5_rpe=rpe,
        **mask_option,
    )
    layer.build((None, None, 8))
    rng = np.random.default_rng(seed)
    for weight in layer.weights:  # non-trivial proposal maps and bias
        weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.5)
    return layer


def proposal_map(layer: EVAAttention, which: str):
    dense = getattr(layer, f"project_{which}_dense")
    kernel, bias = to_np(dense.kernel), to_np(dense.bias)
    norm = getattr(layer, f"project_{which}_norm", None)

    def apply(x):  # [H, Dh] -> [H, Dh]
        y = x @ kernel + bias
        if norm is not None:
            mean = y.mean(-1, keepdims=True)
            var = ((y - mean) ** 2).mean(-1, keepdims=True)
            y = (y - mean) / np.sqrt(var + norm.epsilon) * to_np(norm.gamma) + to_np(norm.beta)
        return y

    return apply


def eva_options_reference(layer: EVAAttention, q, k, v, mask) -> np.ndarray:
    """Evaluation-mode causal EVA over a whole stream from an empty state.

    Query t: exact softmax over the valid keys from the start of its window (of the
    window before, with overlap) up to t, plus the T5 bias of their distance; then the
    `mem_chunks` chunks just before that exact part, each one logit q . k_c with
    k_c = f_k(mean k) and value sum_j softmax_j((w . k_j - |k_j|^2 / 2) / sqrt(Dh)) v_j,
    w = f_q(mean q) + f_k(mean k), means over the chunk's valid tokens. With
    `chunk_mask="authors"` the chunks go on up to the one t lies in: the exact part's
    chunks before t's own are summarised too.
    """
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    batch, length, heads, dim = q.shape
    window, chunk, mem = layer.window_size, layer.chunk_size, layer.mem_chunks
    carried = 1 if layer.overlap_window else 0
    span = (1 + carried) * window
    buckets = max(min(span // 2, 64), 16)
    bias = to_np(layer.t5_bias) if layer.use_t5_rpe else None
    f_q, f_k = proposal_map(layer, "q"), proposal_map(layer, "k")
    scale = 1.0 / math.sqrt(dim)
    out = np.zeros_like(q)
    for b in range(batch):
        for t in range(length):
            start = max(0, (t // window - carried) * window)
            logits, values = [], []
            for j in range(start, t + 1):
                if not mask[b, j]:
                    continue
                logit = np.sum(q[b, t] * k[b, j], axis=-1) * scale  # [H]
                if bias is not None:
                    logit = logit + bias[bucket(t - j, buckets, span)] * scale
                logits.append(logit)
                values.append(v[b, j])
            last = t // chunk if layer.chunk_mask == "authors" and mem else start // chunk
            for c in range(max(0, start // chunk - mem), last):
                members = [j for j in range(c * chunk, (c + 1) * chunk) if mask[b, j]]
                if not members:
                    continue
                key = f_k(k[b, members].mean(0))
                omega = f_q(q[b, members].mean(0)) + key
                log_w = np.stack(
                    [
                        (np.sum(omega * k[b, j], -1) - 0.5 * np.sum(k[b, j] ** 2, -1)) * scale
                        for j in members
                    ]
                )  # [members, H]
                w = np.exp(log_w - log_w.max(0))
                w /= w.sum(0)
                values.append(np.einsum("mh,mhd->hd", w, v[b, members]))
                logits.append(np.sum(q[b, t] * key, -1) * scale)
            if not logits:
                continue
            logits = np.stack(logits)  # [N, H]
            p = np.exp(logits - logits.max(0))
            p /= p.sum(0)
            out[b, t] = np.einsum("nh,nhd->hd", p, np.stack(values))
    return out


CASES = [
    # overlap_window, adaptive_proj, use_t5_rpe, chunk_mask
    (True, "qk", False, "partf"),
    (False, "no-ln", True, "partf"),
    (True, "no-ln", True, "authors"),
    (False, "qk", False, None),  # the default layer (the authors' mask), for comparison
    (False, "qk", False, "partf"),
    (False, "qk", True, "authors"),
]


@pytest.mark.parametrize("overlap,proj,rpe,chunk_mask", CASES)
def test_matches_the_token_by_token_reference(overlap, proj, rpe, chunk_mask):
    layer = make_layer(overlap, proj, rpe, chunk_mask=chunk_mask)
    q, k, v = random_heads(2, 23, 2, 4, seed=1)
    _, mask = random_tokens(2, 23, 1, seed=2)
    out, _ = layer.attend(q, k, v, layer.get_initial_state(2), mask=mask)
    want = eva_options_reference(layer, q, k, v, mask)
    np.testing.assert_allclose(to_np(out), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("overlap,proj,rpe,chunk_mask", CASES[:3])
def test_segments_equal_one_call(overlap, proj, rpe, chunk_mask):
    layer = make_layer(overlap, proj, rpe, window=6, chunk=2, mem=3, chunk_mask=chunk_mask)
    x, mask = random_tokens(2, 37, 8, seed=3)
    assert_segments_equal_one_call(layer, x, mask)
    assert_causal(layer, x, mask, 19)


def test_overlap_lets_a_window_start_see_the_previous_window_exactly():
    """With the summaries off, the first query of window 1 sees only itself without
    overlap, and the whole of window 0 with it."""
    q, k, v = random_heads(1, 8, 2, 4, seed=4)
    mask = np.ones((1, 8), bool)
    plain = make_layer(False, "qk", False, mem=0)
    overlapping = make_layer(True, "qk", False, mem=0)
    a, _ = plain.attend(q, k, v, plain.get_initial_state(1), mask=mask)
    b, _ = overlapping.attend(q, k, v, overlapping.get_initial_state(1), mask=mask)
    np.testing.assert_allclose(to_np(a)[0, 4], v[0, 4], rtol=1e-6)  # softmax over itself
    np.testing.assert_allclose(to_np(a)[:, :4], to_np(b)[:, :4], rtol=1e-6)
    assert np.abs(to_np(a)[:, 4:] - to_np(b)[:, 4:]).max() > 1e-2


def test_options_change_only_what_they_name():
    default = EVAAttention(8, 2, window_size=4, chunk_size=2, mem_chunks=2)
    default.build((None, None, 8))
    names = sorted(w.path.split("/")[-1] for w in default.weights)
    assert "t5_bias" not in names and hasattr(default, "project_q_norm")
    assert not any(key.startswith("prev_") for key in default.state_spec(1))
    assert default.state_spec(1)["mem_k"][0] == (1, 2, 2, 4)
    layer = make_layer(True, "no-ln", True)
    assert not hasattr(layer, "project_q_norm")
    assert layer.state_spec(1)["mem_k"][0] == (1, 2 + 4 // 2, 2, 4)  # M + W / C
    assert layer.t5_bias.shape == (16,)
    clone = assert_config_round_trip(layer)
    assert (clone.overlap_window, clone.adaptive_proj, clone.use_t5_rpe) == (True, "no-ln", True)
    with pytest.raises(ValueError, match="unknown adaptive_proj 'default'"):
        EVAAttention(8, 2, adaptive_proj="default")
