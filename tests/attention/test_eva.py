"""Causal EVA against an independent float64 reference written from the paper's
equations (tests/attention/references.py), in evaluation and in the sampled training
path, from empty and carried states; and its limiting cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention, get_attention_class
from partf.attention.eva import EVAAttention
from partf.attention.transnormer import DiagAttention
from tests.attention import references
from tests.attention.helpers import (
    CUTS_37,
    assert_causal,
    assert_finite_on_large_inputs,
    assert_matches_reference,
    assert_segments_equal_one_call,
    explicit_softmax,
    random_heads,
    random_state,
    random_tokens,
    run_segments,
    to_np,
)
from tests.layer_checks import assert_config_round_trip, float32_atol


def make_layer(heads, dim, window, chunk, mem, seed=0, chunk_mask=None):
    """An EVA layer; `chunk_mask` None leaves the option at its default."""
    mask_option = {} if chunk_mask is None else {"chunk_mask": chunk_mask}
    layer = EVAAttention(
        heads * dim,
        heads,
        window_size=window,
        chunk_size=chunk,
        mem_chunks=mem,
        seed=seed,
        **mask_option,
    )
    layer.build((None, None, heads * dim))
    # Non-trivial proposal maps: random biases and layer-norm scales, not 0 and 1.
    rng = np.random.default_rng(seed + 1)
    for weight in variables(layer).values():
        if "kernel" not in weight.path:
            weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.5 + 0.5)
    return layer


def variables(layer):
    """The proposal maps' weights, under the names the reference takes them."""
    found = {}
    for net, prefix in ((layer.project_q_dense, "fq"), (layer.project_k_dense, "fk")):
        found[f"{prefix}_kernel"], found[f"{prefix}_bias"] = net.kernel, net.bias
    for norm, prefix in ((layer.project_q_norm, "fq"), (layer.project_k_norm, "fk")):
        found[f"{prefix}_gamma"], found[f"{prefix}_beta"] = norm.gamma, norm.beta
    return found


def config(layer):
    return {
        "window_size": layer.window_size,
        "chunk_size": layer.chunk_size,
        "mem_chunks": layer.mem_chunks,
        "chunk_mask": layer.chunk_mask,
        "epsilon": layer.project_q_norm.epsilon,
    }


CASES = [
    # batch, length, heads, dim, window, chunk, mem_chunks, state, chunk_mask
    (1, 7, 1, 4, 4, 2, 1, "empty", "partf"),
    (2, 23, 3, 4, 4, 2, 3, "carried", "partf"),
    (2, 13, 2, 4, 6, 3, 2, "carried", "partf"),
    (2, 29, 2, 4, 6, 2, 100, "empty", "partf"),
    # The authors' mask: the query's own window's chunks before its own are seen too
    # (None: the default, which is that mask).
    (2, 23, 2, 4, 8, 2, 3, "carried", "authors"),
    (1, 29, 2, 4, 6, 2, 100, "empty", None),
]


@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
@pytest.mark.parametrize("batch,length,heads,dim,window,chunk,mem,start,chunk_mask", CASES)
def test_matches_reference(
    fixed_noise, training, batch, length, heads, dim, window, chunk, mem, start, chunk_mask
):
    """Outputs, every state entry and the gradients (inputs and the proposal maps'
    weights) equal the reference's. Training samples w_c = mu_c + noise; the same
    draws are given to the reference, indexed by chunk from the open window's start."""
    layer = make_layer(heads, dim, window, chunk, mem, chunk_mask=chunk_mask)
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = layer.get_initial_state(batch) if start == "empty" else random_state(layer, batch)
    state = {name: np.asarray(ops.convert_to_numpy(value)) for name, value in state.items()}

    def run_layer(q, k, v):
        return layer.attend(q, k, v, state, mask=mask, training=training)

    def run_reference(q, k, v, **weights):
        noise = None
        if training:
            (noise,) = fixed_noise.by_shape.values()  # one draw: one grid of chunks
        return references.eva(config(layer), weights, q, k, v, state, mask, noise=noise)

    assert_matches_reference(run_layer, run_reference, dict(q=q, k=k, v=v), variables(layer))


@pytest.mark.parametrize("chunk_mask", ["partf", "authors"])
@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
def test_carried_state_matches_reference_segment_by_segment(fixed_noise, training, chunk_mask):
    """Four uneven segments (one of a single token), state carried by the layer and by
    the reference each on its own: every segment's output and the final state agree."""
    layer = make_layer(2, 4, 6, 2, 3, chunk_mask=chunk_mask)
    q, k, v = random_heads(2, 37, 2, 4, seed=2)
    _, mask = random_tokens(2, 37, 1, seed=3)
    state = layer.get_initial_state(2)
    ref_state = {name: to_np(value) for name, value in state.items()}
    weights = {name: to_np(var) for name, var in variables(layer).items()}
    outputs, evaluated = [], []
    for number, (start, stop) in enumerate(zip(CUTS_37[:-1], CUTS_37[1:], strict=True)):
        part = slice(start, stop)
        # The same segment and state in evaluation mode, before this call moves on.
        evaluated.append(to_np(layer.attend(q[:, part], k[:, part], v[:, part], state,
                                            mask=mask[:, part])[0]))  # fmt: skip
        out, state = layer.attend(
            q[:, part], k[:, part], v[:, part], state, mask=mask[:, part], training=training
        )
        outputs.append(to_np(out))
        noise = fixed_noise.calls[number] if training else None
        ref_out, ref_state = references.eva(
            config(layer), weights, q[:, part], k[:, part], v[:, part], ref_state,
            mask[:, part], noise=noise,
        )  # fmt: skip
        np.testing.assert_allclose(to_np(out), ref_out, rtol=1e-4, atol=1e-5)
    assert set(state) == set(ref_state)
    for name, value in state.items():
        np.testing.assert_allclose(to_np(value), ref_state[name], rtol=1e-4, atol=1e-5)
    assert len(fixed_noise.calls) == (4 if training else 0)
    # The draws matter: with them the outputs past the first window are not the
    # evaluation ones (mu_c alone).
    moved = np.abs(np.concatenate(outputs, 1) - np.concatenate(evaluated, 1))[:, 6:].max()
    assert (moved > 1e-3) == training, moved


def test_chunk_summaries_reach_every_query_after_the_first_window():
    """Far context reaches a query only through the summaries: with partf's mask the
    first window is exact softmax either way; every later query moves when the
    summaries are switched off, and both layers equal their references."""
    with_memory = make_layer(2, 4, 4, 2, 4, chunk_mask="partf")
    window_only = make_layer(2, 4, 4, 2, 0, chunk_mask="partf")
    window_only.set_weights(with_memory.get_weights()[: len(window_only.get_weights())])
    q, k, v = random_heads(1, 16, 2, 4)
    mask = np.ones((1, 16), bool)
    outputs = []
    for layer in (with_memory, window_only):
        out, _ = layer.attend(q, k, v, layer.get_initial_state(1), mask=mask)
        weights = {name: to_np(var) for name, var in variables(layer).items()}
        state = {name: to_np(value) for name, value in layer.get_initial_state(1).items()}
        want, _ = references.eva(config(layer), weights, q, k, v, state, mask)
        np.testing.assert_allclose(to_np(out), want, rtol=1e-4, atol=1e-5)
        outputs.append(to_np(out))
    a, b = outputs
    np.testing.assert_allclose(a[:, :4], b[:, :4], rtol=1e-5)  # the first window
    moved = np.abs(a[:, 4:] - b[:, 4:]).max(axis=(0, 2, 3))  # per query
    assert (moved > 1e-3).all(), moved


def test_is_exact_softmax_within_one_window():
    """With partf's mask (the authors' also summarises the window's earlier chunks)."""
    layer = make_layer(2, 4, 16, 4, 3, chunk_mask="partf")
    q, k, v = random_heads(2, 16, 2, 4)
    out, _ = layer.attend(q, k, v, layer.get_initial_state(2))
    logits = ops.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(4)
    exact = explicit_softmax(logits, np.tril(np.ones((16, 16), bool))[None, None])
    # Another order of the same sums: 4-term logits, 16-term normaliser and average.
    atol = float32_atol(4 + 16 + 16, np.abs(v).max())
    np.testing.assert_allclose(
        to_np(out), to_np(ops.einsum("bhij,bjhd->bihd", exact, v)), rtol=0, atol=atol
    )


def test_without_summaries_equals_block_diagonal_softmax():
    eva = make_layer(2, 4, 5, 5, 0)
    diag = DiagAttention(8, 2, window_size=5, diag_activation="softmax", norm_type="none")
    diag.build((None, None, 8))
    q, k, v = random_heads(2, 23, 2, 4)
    _, mask = random_tokens(2, 23, 1)
    a, _ = eva.attend(q, k, v, eva.get_initial_state(2), mask=mask)
    b, _ = diag.attend(q, k, v, diag.get_initial_state(2), mask=mask)
    # Windows of 5: 4-term logits, 5-term normaliser and average.
    atol = float32_atol(4 + 5 + 5, np.abs(v).max())
    np.testing.assert_allclose(to_np(a), to_np(b), rtol=0, atol=atol)


@pytest.mark.parametrize("chunk_mask", ["partf", "authors"])
def test_segments_equal_one_call_in_evaluation(chunk_mask):
    layer = create_attention(
        "eva", 12, 3, window_size=8, chunk_size=2, mem_chunks=5, chunk_mask=chunk_mask
    )
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_the_two_chunk_masks_differ_only_past_a_queries_first_chunk():
    """Within a query's first chunk of its window both masks see the same; after it the
    authors' also sees the window's earlier chunks, so the outputs part."""
    partf, authors = make_layer(2, 4, 8, 2, 4, chunk_mask="partf"), make_layer(2, 4, 8, 2, 4)
    authors.set_weights(partf.get_weights())
    q, k, v = random_heads(1, 24, 2, 4)
    a = to_np(partf.attend(q, k, v, partf.get_initial_state(1))[0])
    b = to_np(authors.attend(q, k, v, authors.get_initial_state(1))[0])
    first_chunks = np.isin(np.arange(24) % 8, (0, 1))
    np.testing.assert_allclose(a[:, first_chunks], b[:, first_chunks], rtol=1e-5, atol=1e-6)
    assert np.abs(a - b)[:, ~first_chunks].max() > 1e-2


def test_the_default_mask_is_the_authors():
    """Left unset, chunk_mask is the authors' causal mask: the default layer equals the
    reference of that mask, and not that of partf's, which differs here."""
    layer = make_layer(2, 4, 8, 2, 4)
    assert layer.chunk_mask == "authors"
    q, k, v = random_heads(2, 24, 2, 4, seed=5)
    _, mask = random_tokens(2, 24, 1, seed=6)
    state = {name: to_np(value) for name, value in layer.get_initial_state(2).items()}
    weights = {name: to_np(var) for name, var in variables(layer).items()}
    out = to_np(layer.attend(q, k, v, layer.get_initial_state(2), mask=mask)[0])
    for chunk_mask, equal in (("authors", True), ("partf", False)):
        settings = {**config(layer), "chunk_mask": chunk_mask}
        want, _ = references.eva(settings, weights, q, k, v, state, mask)
        assert np.allclose(out, want, rtol=1e-4, atol=1e-5) == equal, chunk_mask


def test_training_samples_the_proposals_from_the_seed_generator():
    layer = create_attention("eva", 12, 3, window_size=4, chunk_size=2, mem_chunks=4, seed=3)
    x, mask = random_tokens(2, 20, 12)
    cuts = (0, 9, 20)
    first, _ = run_segments(layer, x, mask, cuts, training=True)
    second, _ = run_segments(layer, x, mask, cuts, training=True)
    evaluated, _ = run_segments(layer, x, mask, cuts, training=False)
    np.testing.assert_allclose(first[:, :2], evaluated[:, :2], rtol=1e-5)  # exact first chunk
    assert not np.allclose(first[:, 4:], second[:, 4:])  # noise beyond it
    assert np.isfinite(first).all()


def test_causal():
    layer = create_attention("eva", 12, 3, window_size=4, chunk_size=2, mem_chunks=3)
    x, mask = random_tokens(2, 17, 12)
    assert_causal(layer, x, mask, position=9)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("eva", {"window_size": 4, "chunk_size": 2, "mem_chunks": 3})


def test_config_round_trip_and_validation():
    assert get_attention_class("eva") is EVAAttention
    layer = EVAAttention(12, 3, window_size=12, chunk_size=3, mem_chunks=6, seed=5)
    clone = assert_config_round_trip(layer)
    assert (clone.window_size, clone.chunk_size, clone.mem_chunks, clone.seed) == (12, 3, 6, 5)
    with pytest.raises(ValueError, match="chunk_size dividing window_size"):
        EVAAttention(12, 3, window_size=10, chunk_size=4)
    assert clone.chunk_mask == "authors"
    clone = assert_config_round_trip(EVAAttention(12, 3, window_size=4, chunk_size=2,
                                                  chunk_mask="partf"))  # fmt: skip
    assert clone.chunk_mask == "partf"
    with pytest.raises(ValueError, match="unknown chunk_mask 'all'"):
        EVAAttention(12, 3, chunk_mask="all")
