"""Gumbel-softmax samples: frequencies, straight-through, gradients."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from partf.layers.gumbel import gumbel_softmax


def test_argmax_frequency_matches_pi_at_small_tau():
    pi = np.array([0.5, 0.3, 0.15, 0.05], "float32")
    # Any shift of log(pi) is the same distribution: use a shifted version.
    logits = ops.convert_to_tensor(np.log(pi) + 2.0)
    n = 40000
    samples = gumbel_softmax(logits, 0.05, keras.random.SeedGenerator(1), sample_shape=(n,))
    samples = np.asarray(samples)
    assert samples.shape == (n, 4)
    freq = np.bincount(samples.argmax(-1), minlength=4) / n
    # Binomial standard error is at most 0.0025: allow 4 of them.
    np.testing.assert_allclose(freq, pi, atol=0.01)
    # At small tau the weights are nearly one-hot.
    assert np.mean(samples.max(-1) > 0.9) > 0.8


def test_soft_samples_are_distributions_and_tau_sharpens():
    logits = ops.convert_to_tensor([0.0, 0.0, 0.0])
    seed = keras.random.SeedGenerator(2)
    hot = np.asarray(gumbel_softmax(logits, 5.0, seed, sample_shape=(2000,)))
    cold = np.asarray(gumbel_softmax(logits, 0.2, seed, sample_shape=(2000,)))
    np.testing.assert_allclose(hot.sum(-1), 1.0, rtol=1e-5)
    assert hot.max(-1).mean() < cold.max(-1).mean()


def test_straight_through_is_one_hot_with_soft_gradients():
    logits = tf.Variable([0.3, -0.2, 0.1])
    target = ops.convert_to_tensor([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        weights = gumbel_softmax(
            logits, 0.7, keras.random.SeedGenerator(3), straight_through=True, sample_shape=(5,)
        )
        loss = ops.sum(weights * target)
    values = np.asarray(weights)
    # Exactly one-hot forward.
    assert set(np.unique(values)) <= {0.0, 1.0}
    np.testing.assert_array_equal(values.sum(-1), 1.0)
    grad = np.asarray(tape.gradient(loss, logits))
    assert np.all(np.isfinite(grad)) and np.abs(grad).sum() > 1e-4


def test_samples_differ_between_calls_and_follow_seed():
    logits = ops.zeros((3,))
    first = gumbel_softmax(logits, 1.0, keras.random.SeedGenerator(4))
    second = gumbel_softmax(logits, 1.0, keras.random.SeedGenerator(4))
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    seed = keras.random.SeedGenerator(4)
    a, b = gumbel_softmax(logits, 1.0, seed), gumbel_softmax(logits, 1.0, seed)
    assert not np.allclose(np.asarray(a), np.asarray(b))
