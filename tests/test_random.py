"""Random draws for XLA: uniform range, seeding and XLA equals eager, dropout statistics,
the hashed random bits against a numpy reference and statistical checks."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.random import Dropout, dropout, keyed_draws, normal, random_bits, uniform
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


def test_uniform_is_the_same_compiled_or_not():
    """The same seed state gives the same numbers eager and under XLA (TensorFlow's own
    stateless draws do not), so jit_compile does not change what a model samples."""
    eager = np.asarray(uniform((4, 33), keras.random.SeedGenerator(5), minval=1e-10))
    seed = keras.random.SeedGenerator(5)
    compiled = tf.function(lambda: uniform((4, 33), seed, minval=1e-10), jit_compile=True)
    np.testing.assert_array_equal(np.asarray(compiled()), eager)
    # The top 24 bits of the hashed bits, scaled into [minval, maxval).
    bits = _reference_bits((4, 33), 5, 0) >> 8
    np.testing.assert_allclose(eager, 1e-10 + bits * 2.0**-24, rtol=1e-6)


def test_normal_moments_and_the_same_compiled_or_not():
    z = np.asarray(normal((40000,), keras.random.SeedGenerator(3), mean=1.0, stddev=2.0))
    # Standard errors: mean 0.01, standard deviation about 0.007: allow 5 of them.
    assert abs(z.mean() - 1.0) < 0.05 and abs(z.std() - 2.0) < 0.035
    # Normal tails: about 4.6% beyond two standard deviations.
    assert abs(np.mean(np.abs(z - 1.0) > 4.0) - 0.0455) < 0.006
    seed = keras.random.SeedGenerator(4)
    compiled = tf.function(lambda: normal((3, 17), seed), jit_compile=True)
    eager = np.asarray(normal((3, 17), keras.random.SeedGenerator(4)))
    np.testing.assert_allclose(np.asarray(compiled()), eager, rtol=1e-5, atol=1e-6)


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
    # Compiled, the mask has the same statistics and depends only on the seed state.
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


# --------------------------------------------------------------- random_bits
def _reference_bits(shape, initial_seed, draw):
    """The same keyed hash, written out element by element in Python integers."""
    m = 0xFFFFFFFF

    def mix(x):
        x ^= x >> 16
        x = (x * 0x7FEB352D) & m
        x ^= x >> 15
        x = (x * 0x846CA68B) & m
        return x ^ (x >> 16)

    key_1 = mix((mix(initial_seed & m) + draw * 0x9E3779B9) & m)
    key_2 = mix(key_1 ^ 0x9E3779B9)
    out = [mix(mix((mix(i ^ key_1) + key_2) & m) ^ key_1) for i in range(int(np.prod(shape)))]
    return np.array(out, dtype=np.uint32).reshape(shape)


def test_random_bits_match_reference_eager_and_compiled():
    seed = keras.random.SeedGenerator(11)
    first = np.asarray(random_bits((3, 5, 7), seed))
    second = np.asarray(random_bits((3, 5, 7), seed))
    np.testing.assert_array_equal(first, _reference_bits((3, 5, 7), 11, 0))
    np.testing.assert_array_equal(second, _reference_bits((3, 5, 7), 11, 1))
    compiled = tf.function(lambda: random_bits((3, 5, 7), seed), jit_compile=True)
    np.testing.assert_array_equal(np.asarray(compiled()), _reference_bits((3, 5, 7), 11, 2))


def test_random_bits_take_dynamic_shapes_in_graphs():
    seed = keras.random.SeedGenerator(4)
    graph = tf.function(
        lambda x: random_bits(tuple(ops.shape(x)), seed),
        input_signature=[tf.TensorSpec([None, 6])],
    )
    np.testing.assert_array_equal(np.asarray(graph(tf.ones((5, 6)))), _reference_bits((5, 6), 4, 0))


def test_random_bits_look_independent():
    n = 1 << 16
    seed = keras.random.SeedGenerator(0)
    a = np.asarray(random_bits((n,), seed)).astype(np.int64)
    b = np.asarray(random_bits((n,), seed)).astype(np.int64)  # next draw
    c = np.asarray(random_bits((n,), keras.random.SeedGenerator(1))).astype(np.int64)
    # Every bit position is 1 half of the time (standard error 0.002: allow 5).
    frequencies = ((a[:, None] >> np.arange(32)) & 1).mean(axis=0)
    assert np.abs(frequencies - 0.5).max() < 0.01
    # The top byte is uniform: chi-square with 255 degrees of freedom (mean 255, sd 22.6).
    counts = np.bincount(a >> 24, minlength=256)
    chi2 = ((counts - n / 256) ** 2 / (n / 256)).sum()
    assert chi2 < 255 + 6 * 22.6
    # No correlation between neighbours, successive draws or seeds (se 0.004: allow 5).
    u = [x / 2.0**32 for x in (a, b, c)]
    for x, y in ((u[0][:-1], u[0][1:]), (u[0], u[1]), (u[0], u[2]), (u[1], u[2])):
        assert abs(np.corrcoef(x, y)[0, 1]) < 0.02
    # Neighbouring indices give unrelated values: about half the bits differ (mean 16).
    differing = np.unpackbits((a[:-1] ^ a[1:]).astype(">u4").view(np.uint8)).reshape(-1, 32)
    assert abs(differing.sum(axis=1).mean() - 16) < 0.1


class _MaskRecorder(keras.layers.Layer):
    """Two `Dropout(0.5)` layers on ones; counts, per element, the steps each kept it
    and the steps both kept it (non-trainable variables, updated inside the step)."""

    def __init__(self, shape, **kwargs):
        super().__init__(**kwargs)
        self.first, self.second = Dropout(0.5, seed=1), Dropout(0.5, seed=2)
        self.counts = [
            self.add_weight(name=n, shape=shape, initializer="zeros", trainable=False)
            for n in ("first", "second", "both")
        ]
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones")

    def call(self, x, training=None):
        ones = ops.ones(self.counts[0].shape)
        a = ops.cast(self.first(ones, training=training) > 0, "float32")
        b = ops.cast(self.second(ones, training=training) > 0, "float32")
        if training:
            for count, kept in zip(self.counts, (a, b, a * b), strict=True):
                count.assign_add(kept)
        return x * self.scale


def test_dropout_masks_are_fresh_per_step_layer_and_element_in_a_compiled_loop():
    """What dropout promises, inside fit's XLA-compiled multi-step loop: a new mask at
    every step (each element kept in about half the steps, not always or never), at the
    stated rate, independent between layers (both kept a quarter of the time)."""
    shape, steps = (16, 32), 64
    inputs = keras.Input((1,))
    recorder = _MaskRecorder(shape)
    model = keras.Model(inputs, recorder(inputs))
    model.compile(optimizer="sgd", loss="mse", jit_compile=True, steps_per_execution=16)
    data = np.ones((steps, 1), "float32")
    model.fit(data, data, batch_size=1, epochs=1, verbose=0, shuffle=False)
    first, second, both = (np.asarray(c) / steps for c in recorder.counts)
    # 512 elements x 64 steps at rate 0.5: the kept fraction is 0.5 (se 0.0028: allow 5).
    assert abs(first.mean() - 0.5) < 0.015 and abs(second.mean() - 0.5) < 0.015
    # A mask repeated across steps would keep each element in 0 or 64 steps; fresh masks
    # keep it Binomial(64, 0.5) times: sd 0.0625 of the fraction, and never all or none.
    assert 0.05 < first.std() < 0.08
    assert np.all((first > 0) & (first < 1))
    # Independent layers: both keep an element a quarter of the time (se 0.0024).
    assert abs(both.mean() - 0.25) < 0.012
    # Independent elements: neighbouring counts are uncorrelated (se 0.044: allow 4).
    assert abs(np.corrcoef(first.ravel()[:-1], first.ravel()[1:])[0, 1]) < 0.18


def test_keyed_draws_do_not_advance_the_generator_and_follow_the_key():
    def bits(generator, key):
        with keyed_draws(key):
            first = ops.convert_to_numpy(random_bits((4096,), generator))
            second = ops.convert_to_numpy(random_bits((4096,), generator))
        return first, second

    generator = keras.random.SeedGenerator(5)
    start = ops.convert_to_numpy(generator.state).tolist()
    first, second = bits(generator, 11)
    assert ops.convert_to_numpy(generator.state).tolist() == start  # nothing written
    # Two draws in one scope differ; the same key gives the same draws again; another
    # key (the next step's) and another generator (another layer) give others.
    assert (first != second).mean() > 0.99
    again, _ = bits(generator, 11)
    np.testing.assert_array_equal(again, first)
    assert (bits(generator, 12)[0] != first).mean() > 0.99
    assert (bits(keras.random.SeedGenerator(6), 11)[0] != first).mean() > 0.99
    # Still uniform bits: each bit set about half the time.
    ones = np.unpackbits(first.view(np.uint8)).mean()
    assert abs(ones - 0.5) < 0.01
    # Outside the scope the generator advances again, as before.
    random_bits((2,), generator)
    assert ops.convert_to_numpy(generator.state).tolist() != start


def test_dropout_inside_keyed_draws_keeps_the_rate():
    x = ops.ones((256, 256))
    with keyed_draws(3):
        y = ops.convert_to_numpy(dropout(x, 0.3, keras.random.SeedGenerator(1)))
    assert abs((y == 0).mean() - 0.3) < 0.01
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.7], rtol=1e-6)
