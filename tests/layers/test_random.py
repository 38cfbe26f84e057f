"""Random draws for XLA: uniform range and seeding, dropout statistics, XLA equals eager."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.layers.random import Dropout, dropout, uniform
from tests.layer_checks import assert_config_round_trip


def test_uniform_range_mean_and_seeding():
    u = np.asarray(uniform((20000,), keras.random.SeedGenerator(0), minval=2.0, maxval=4.0))
    assert u.min() >= 2.0 and u.max() < 4.0
    # Mean 3, standard error 0.0041: allow 5 of them.
    assert abs(u.mean() - 3.0) < 0.02
    same = uniform((20000,), keras.random.SeedGenerator(0), minval=2.0, maxval=4.0)
    np.testing.assert_array_equal(np.asarray(same), u)
    seed = keras.random.SeedGenerator(0)
    assert not np.array_equal(np.asarray(uniform((8,), seed)), np.asarray(uniform((8,), seed)))


def test_uniform_accepts_int_seed():
    a = np.asarray(uniform((5,), 3))
    np.testing.assert_array_equal(a, np.asarray(uniform((5,), 3)))


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_dropout_keeps_expected_fraction_scaled(rate):
    x = ops.ones((200, 100))
    y = np.asarray(dropout(x, rate, keras.random.SeedGenerator(1)))
    kept = y != 0
    # Binomial standard error of the kept fraction is at most 0.0035: allow 5 of them.
    assert abs(kept.mean() - (1 - rate)) < 0.018
    np.testing.assert_allclose(y[kept], 1.0 / (1.0 - rate), rtol=1e-6)


def test_dropout_noise_shape_broadcasts():
    y = np.asarray(dropout(ops.ones((6, 5, 4)), 0.5, keras.random.SeedGenerator(2), (None, 1, 4)))
    # One mask per (row, feature), shared along the middle axis.
    np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1], y.shape))


def test_dropout_under_xla_keeps_fraction_and_follows_seed():
    # Compiled, the mask has the same statistics and depends only on the seed state
    # (XLA's Philox stream differs from TensorFlow's kernel, as TensorFlow documents).
    x = tf.ones((64, 8, 64))
    seeds = keras.random.SeedGenerator(7), keras.random.SeedGenerator(7)
    first = tf.function(lambda x: dropout(x, 0.3, seeds[0]), jit_compile=True)
    second = tf.function(lambda x: dropout(x, 0.3, seeds[1]), jit_compile=True)
    a, b = np.asarray(first(x)), np.asarray(second(x))
    np.testing.assert_array_equal(a, b)
    # Kept fraction 0.7, standard error 0.0025: allow 5 of them.
    assert abs((a != 0).mean() - 0.7) < 0.013
    np.testing.assert_allclose(a[a != 0], 1.0 / 0.7, rtol=1e-6)
    assert not np.array_equal(np.asarray(first(x)), a)  # the generator advanced


def test_layer_is_active_only_in_training_and_round_trips():
    layer = Dropout(0.4, noise_shape=(None, 1), seed=3, name="drop")
    x = ops.ones((50, 7))
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(x))
    y = np.asarray(layer(x, training=True))
    np.testing.assert_allclose(y[y != 0], 1.0 / 0.6, rtol=1e-6)
    np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1], y.shape))
    clone = assert_config_round_trip(layer)
    assert clone.rate == 0.4 and clone.noise_shape == (None, 1) and clone.seed == 3
