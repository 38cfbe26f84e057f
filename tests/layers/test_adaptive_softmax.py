"""Adaptive softmax: normalisation, loss == -log p, cutoff validation, tying."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.layers.adaptive_softmax import (
    AdaptiveSoftmax,
    tail_projection_dims,
    validate_cutoffs,
)
from tests.layer_checks import assert_close, assert_config_round_trip

V, D = 40, 16


@pytest.fixture(scope="module")
def hidden():
    return keras.random.normal((3, 5, D), seed=0)


@pytest.fixture(scope="module")
def targets():
    rng = np.random.default_rng(0)
    t = rng.integers(1, V, size=(3, 5)).astype("int32")
    t[0, :4] = [1, 9, 10, 39]  # edges of every cluster for cutoffs (10, 25)
    t[2, 3:] = 0  # padding
    return t


@pytest.mark.parametrize(
    "cutoffs, proj_dims", [((10, 25), None), ((10, 25), (5, 3)), ((7,), None), ((), None)]
)
def test_distribution_and_nll(hidden, targets, cutoffs, proj_dims):
    layer = AdaptiveSoftmax(V, cutoffs=cutoffs, proj_factor=2, proj_dims=proj_dims)
    log_probs = np.asarray(layer(hidden))
    assert log_probs.shape == (3, 5, V)
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, rtol=1e-5)
    nll = np.asarray(layer.token_nll(hidden, targets))
    expected = -np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    expected[targets == 0] = 0.0
    np.testing.assert_allclose(nll, expected, rtol=1e-5, atol=1e-5)


def test_nll_gradients_match_full_distribution(hidden, targets):
    layer = AdaptiveSoftmax(V, cutoffs=(10, 25))
    layer.build(hidden.shape)
    with tf.GradientTape(persistent=True) as tape:
        fast = ops.sum(layer.token_nll(hidden, targets))
        full = -ops.sum(
            ops.where(
                targets == 0,
                0.0,
                ops.take_along_axis(layer.log_probs(hidden), targets[..., None], -1)[..., 0],
            )
        )
    for got, want in zip(
        tape.gradient(fast, layer.trainable_weights),
        tape.gradient(full, layer.trainable_weights),
        strict=True,
    ):
        assert_close(got, want, atol=1e-5)


def test_tail_projections():
    layer = AdaptiveSoftmax(V, cutoffs=(10, 25), proj_factor=4)
    layer.build((None, D))
    assert [p.units for p in layer.tail_projections] == [4, 1]
    assert layer.head.units == 12  # 10 head tokens + 2 clusters
    assert tail_projection_dims(128, 2, 4) == (32, 8)
    assert tail_projection_dims(128, 2, 4, (50, 20)) == (50, 20)


def test_tied_plain_softmax(hidden, targets):
    table = keras.random.normal((V, D), seed=1)
    layer = AdaptiveSoftmax(V, tie_embeddings=True)
    log_probs = layer(hidden, tied_kernel=table)
    logits = ops.einsum("btd,vd->btv", hidden, table) + layer.head_bias
    assert_close(log_probs, ops.log_softmax(logits, axis=-1), atol=1e-5)
    assert [w.name for w in layer.weights] == ["head_bias"]
    with pytest.raises(ValueError, match="pass the embedding table"):
        layer.log_probs(hidden)


@pytest.mark.parametrize(
    "cutoffs, message",
    [
        ((10, 5), "sorted and unique"),
        ((10, 10), "sorted and unique"),
        ((0, 10), "must be positive"),
        ((10, 40), "below vocab_size=40"),
        ((10, 50), "below vocab_size=40"),
    ],
)
def test_cutoff_errors(cutoffs, message):
    with pytest.raises(ValueError, match=message):
        validate_cutoffs(cutoffs, V)
    with pytest.raises(ValueError, match=message):
        AdaptiveSoftmax(V, cutoffs=cutoffs)


def test_other_errors():
    with pytest.raises(ValueError, match="proj_dims has 1 entries but there are 2"):
        AdaptiveSoftmax(V, cutoffs=(10, 20), proj_dims=(4,))
    with pytest.raises(ValueError, match="plain softmax only"):
        AdaptiveSoftmax(V, cutoffs=(10,), tie_embeddings=True)


def test_config_round_trip_non_default():
    layer = AdaptiveSoftmax(V, cutoffs=(5, 20), proj_factor=3, proj_dims=(7, 2), name="out")
    clone = assert_config_round_trip(layer)
    assert clone.cutoffs == (5, 20) and clone.proj_dims == (7, 2) and clone.proj_factor == 3
    assert_config_round_trip(AdaptiveSoftmax(V, tie_embeddings=True))


def _tail_targets(kind: str) -> np.ndarray:
    """[4, 16] targets for vocabulary 300, cutoffs (20, 100): N = 64 positions."""
    rng = np.random.default_rng(3)
    if kind == "few_in_tails":  # every tail cluster fits the N/8 block
        t = rng.integers(1, 20, size=(4, 16))
        t[0, :5], t[1, :3] = rng.integers(20, 100, 5), rng.integers(100, 300, 3)
    elif kind == "uniform":  # tail 2 holds about 2/3 of the rows: the N/1 block
        t = rng.integers(1, 300, size=(4, 16))
    elif kind == "one_tail_empty":  # tail 1 empty, tail 2 needs the N/2 block
        t = np.where(rng.uniform(size=(4, 16)) < 0.4, rng.integers(100, 300, (4, 16)), 5)
    else:  # every row in tail 2 but the padding
        t = rng.integers(100, 300, size=(4, 16))
    t[3, 12:] = 0
    return t.astype("int32")


@pytest.fixture(scope="module")
def tail_case():
    """A layer, its inputs, and token_nll with gradients, eager and XLA-compiled.

    One compiled function serves every case: all block sizes are branches of the
    same program, and the targets decide at run time which one runs.
    """
    layer = AdaptiveSoftmax(300, cutoffs=(20, 100), proj_factor=2)
    layer.build((4, 16, 8))
    hidden = keras.random.normal((4, 16, 8), seed=1)
    weights = keras.random.uniform((4, 16), seed=2)  # a non-uniform upstream gradient

    def fast(h, targets):
        with tf.GradientTape() as tape:
            tape.watch(h)
            nll = layer.token_nll(h, targets)
            loss = ops.sum(nll * weights)
        return nll, tape.gradient(loss, [h, *layer.trainable_weights])

    def full(h, targets):
        with tf.GradientTape() as tape:
            tape.watch(h)
            picked = ops.take_along_axis(layer.log_probs(h), targets[..., None], -1)[..., 0]
            nll = ops.where(targets == 0, 0.0, -picked)
            loss = ops.sum(nll * weights)
        return nll, tape.gradient(loss, [h, *layer.trainable_weights])

    functions = {False: fast, True: tf.function(fast, jit_compile=True)}
    return hidden, functions, full


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("kind", ["few_in_tails", "uniform", "one_tail_empty", "all_in_tail"])
def test_gathered_tails_match_full_distribution(tail_case, kind, jit):
    # token_nll scores each tail cluster on a block of its rows only, with a
    # hand-written gradient; check values and gradients (to the hidden states
    # and every weight) against -log p from the full distribution, for each
    # block size, with and without XLA.
    hidden, functions, full = tail_case
    targets = ops.convert_to_tensor(_tail_targets(kind))
    got = functions[jit](hidden, targets)
    want = full(hidden, targets)
    assert_close(got[0], want[0], atol=1e-5)
    for g, w in zip(got[1], want[1], strict=True):
        assert_close(g, w, atol=1e-5)
