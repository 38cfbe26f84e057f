"""Causal EVA against its token-by-token reference, and its limiting cases."""

import math

import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention, get_attention_class
from partf.attention.eva import EVAAttention, eva_reference
from partf.attention.transnormer import DiagAttention
from tests.attention.helpers import (
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    explicit_softmax,
    gradients,
    random_heads,
    random_tokens,
    run_segments,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


def make_layer(heads, dim, window, chunk, mem, seed=0):
    layer = EVAAttention(
        heads * dim, heads, window_size=window, chunk_size=chunk, mem_chunks=mem, seed=seed
    )
    layer.build((None, None, heads * dim))
    return layer


@pytest.mark.parametrize(
    "batch,length,heads,dim,window,chunk,mem,check_gradients",
    [
        (1, 7, 1, 4, 4, 2, 1, True),
        (2, 23, 3, 4, 4, 2, 3, True),
        (2, 29, 2, 4, 6, 2, 100, False),
    ],
)
def test_matches_reference_in_evaluation(
    batch, length, heads, dim, window, chunk, mem, check_gradients
):
    """Evaluation mode is deterministic (w_c = mu_c): the gridded, chunked path
    equals the token-by-token one, on outputs and gradients."""
    layer = make_layer(heads, dim, window, chunk, mem)
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    empty = layer.get_initial_state(batch)
    out, _ = layer.attend(q, k, v, empty, mask=mask)
    np.testing.assert_allclose(
        to_np(out), to_np(eva_reference(layer, q, k, v, mask)), rtol=1e-4, atol=1e-5
    )
    if not check_gradients:
        return
    fast = gradients(lambda q, k, v: layer.attend(q, k, v, empty, mask=mask)[0], [q, k, v])
    slow = gradients(lambda q, k, v: eva_reference(layer, q, k, v, mask), [q, k, v])
    for name, got, want in zip("qkv", fast, slow, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=name)


def test_chunk_summaries_matter():
    """Far context reaches a query only through the summaries: with them the
    output differs from the window-only (mem_chunks=0) one, and matches the reference."""
    with_memory = make_layer(2, 4, 4, 2, 4)
    window_only = make_layer(2, 4, 4, 2, 0)
    window_only.set_weights(with_memory.get_weights()[: len(window_only.get_weights())])
    q, k, v = random_heads(1, 16, 2, 4)
    mask = np.ones((1, 16), bool)
    a, _ = with_memory.attend(q, k, v, with_memory.get_initial_state(1), mask=mask)
    b, _ = window_only.attend(q, k, v, window_only.get_initial_state(1), mask=mask)
    np.testing.assert_allclose(to_np(a)[:, :4], to_np(b)[:, :4], rtol=1e-5)  # first window
    assert np.abs(to_np(a)[:, 4:] - to_np(b)[:, 4:]).min() > 0


def test_is_exact_softmax_within_one_window():
    layer = make_layer(2, 4, 16, 4, 3)
    q, k, v = random_heads(2, 16, 2, 4)
    out, _ = layer.attend(q, k, v, layer.get_initial_state(2))
    logits = ops.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(4)
    exact = explicit_softmax(logits, np.tril(np.ones((16, 16), bool))[None, None])
    np.testing.assert_allclose(
        to_np(out), to_np(ops.einsum("bhij,bjhd->bihd", exact, v)), rtol=1e-5, atol=1e-6
    )


def test_without_summaries_equals_block_diagonal_softmax():
    eva = make_layer(2, 4, 5, 5, 0)
    diag = DiagAttention(8, 2, window_size=5, norm_type="none")
    diag.build((None, None, 8))
    q, k, v = random_heads(2, 23, 2, 4)
    _, mask = random_tokens(2, 23, 1)
    a, _ = eva.attend(q, k, v, eva.get_initial_state(2), mask=mask)
    b, _ = diag.attend(q, k, v, diag.get_initial_state(2), mask=mask)
    np.testing.assert_allclose(to_np(a), to_np(b), rtol=1e-5, atol=1e-6)


def test_segments_equal_one_call_in_evaluation():
    layer = create_attention("eva", 12, 3, window_size=8, chunk_size=2, mem_chunks=5)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_training_samples_the_proposals_from_the_seed_generator():
    layer = create_attention("eva", 12, 3, window_size=4, chunk_size=2, mem_chunks=4, seed=3)
    x, mask = random_tokens(2, 20, 12)
    cuts = (0, 9, 20)
    first, _ = run_segments(layer, x, mask, cuts, training=True)
    second, _ = run_segments(layer, x, mask, cuts, training=True)
    evaluated, _ = run_segments(layer, x, mask, cuts, training=False)
    np.testing.assert_allclose(first[:, :4], evaluated[:, :4], rtol=1e-5)  # exact first window
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
