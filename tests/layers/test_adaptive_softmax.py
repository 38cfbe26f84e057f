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


def weights_of(layer):
    """The layer's weights by role: head (kernel, bias), then per tail cluster
    (projection, output kernel, output bias)."""
    tails = [
        (proj.kernel, out.kernel, out.bias)
        for proj, out in zip(layer.tail_projections, layer.tail_outputs, strict=True)
    ]
    return (layer.head.kernel, layer.head.bias), tails


def numpy_adaptive_softmax(layer, hidden, targets, upstream):
    """Grave et al.'s adaptive softmax in float64 numpy from the raw weights.

    log p(t) = log softmax(h W_head + b)[t] for a head token; for a token of tail
    cluster i, log softmax(head)[c0 + i] + log softmax((h P_i) W_i + b_i)[t - low_i].

    Returns (log-probabilities [..., V], -log p(target) [...] with 0 at target 0, and the
    gradients of sum(upstream * nll) with respect to hidden and to every weight, in
    `layer.trainable_weights` order), the gradients written out from
    d(-log softmax(z)[t]) / dz = softmax(z) - onehot(t).
    """
    (head_kernel, head_bias), tails = weights_of(layer)
    as64 = lambda w: np.asarray(ops.convert_to_numpy(w), "float64")
    h = as64(hidden).reshape(-1, as64(hidden).shape[-1])
    t = np.asarray(targets).reshape(-1)
    u = np.asarray(upstream, "float64").reshape(-1) * (t != 0)
    cutoffs, vocab = layer.cutoffs, layer.vocab_size
    bounds = (*cutoffs, vocab)

    def log_softmax(z):
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    head_logits = h @ as64(head_kernel) + as64(head_bias)
    head = log_softmax(head_logits)
    c0 = cutoffs[0] if cutoffs else vocab
    log_probs = np.zeros((len(h), vocab))
    log_probs[:, :c0] = head[:, :c0]
    cluster = np.searchsorted(np.asarray(cutoffs), t, side="right") if cutoffs else 0 * t
    head_target = np.where(cluster == 0, t, c0 + cluster - 1)
    d_head = np.exp(head) * u[:, None]
    d_head[np.arange(len(h)), head_target] -= u
    grads = {id(head_kernel): h.T @ d_head, id(head_bias): d_head.sum(0)}
    d_hidden = d_head @ as64(head_kernel).T
    for i, (projection, kernel, bias) in enumerate(tails):
        low, high = bounds[i], bounds[i + 1]
        z = h @ as64(projection)
        tail = log_softmax(z @ as64(kernel) + as64(bias))
        log_probs[:, low:high] = head[:, c0 + i : c0 + i + 1] + tail
        member = (cluster == i + 1) * u
        d_tail = np.exp(tail) * member[:, None]
        rows = np.flatnonzero(member)
        d_tail[rows, t[rows] - low] -= member[rows]
        grads[id(kernel)], grads[id(bias)] = z.T @ d_tail, d_tail.sum(0)
        d_z = d_tail @ as64(kernel).T
        grads[id(projection)] = h.T @ d_z
        d_hidden += d_z @ as64(projection).T
    nll = np.where(t == 0, 0.0, -log_probs[np.arange(len(h)), t])
    shape = np.shape(targets)
    weight_grads = [grads[id(w)] for w in layer.trainable_weights]
    return (
        log_probs.reshape(*shape, vocab),
        nll.reshape(shape),
        [d_hidden.reshape(np.shape(hidden)), *weight_grads],
    )


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
def test_distribution_nll_and_gradients_match_numpy(hidden, targets, cutoffs, proj_dims):
    """log_probs, token_nll and the gradients of the loss (hidden states and every
    weight) against the numpy reference built from the raw head and tail weights."""
    layer = AdaptiveSoftmax(V, cutoffs=cutoffs, proj_factor=2, proj_dims=proj_dims)
    layer.build(hidden.shape)
    # Non-zero biases, so a wrong offset between head and tails shows.
    rng = np.random.default_rng(4)
    for weight in layer.trainable_weights:
        if len(weight.shape) == 1:
            weight.assign(rng.normal(size=weight.shape).astype("float32"))
    upstream = rng.uniform(size=targets.shape)
    want_log_probs, want_nll, want_grads = numpy_adaptive_softmax(layer, hidden, targets, upstream)
    log_probs = np.asarray(layer(hidden))
    np.testing.assert_allclose(log_probs, want_log_probs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, rtol=1e-5)
    with tf.GradientTape() as tape:
        tape.watch(hidden)
        nll = layer.token_nll(hidden, targets)
        loss = ops.sum(nll * upstream)
    np.testing.assert_allclose(np.asarray(nll), want_nll, rtol=1e-5, atol=1e-5)
    got = tape.gradient(loss, [hidden, *layer.trainable_weights])
    for g, w in zip(got, want_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)


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

    functions = {False: fast, True: tf.function(fast, jit_compile=True)}
    return layer, hidden, weights, functions


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("kind", ["few_in_tails", "uniform", "one_tail_empty", "all_in_tail"])
def test_gathered_tails_match_numpy(tail_case, kind, jit):
    # token_nll scores each tail cluster on a block of its rows only, with a
    # hand-written gradient; check values and gradients (to the hidden states and
    # every weight) against the numpy reference, for each block size, with and
    # without XLA.
    layer, hidden, weights, functions = tail_case
    targets = _tail_targets(kind)
    nll, grads = functions[jit](hidden, ops.convert_to_tensor(targets))
    _, want_nll, want_grads = numpy_adaptive_softmax(layer, hidden, targets, weights)
    np.testing.assert_allclose(np.asarray(nll), want_nll, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)
