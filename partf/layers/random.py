"""Random draws that stay cheap under XLA: uniform noise, dropout, a Dropout layer.

`keras.random` on the TensorFlow backend draws with TensorFlow's default
("auto_select") stateless algorithm. Under XLA on a CPU that draw is about
100 times slower than the same Philox generator asked for by name: XLA fuses
the seed-to-key/counter scrambling into the per-element loop, and further
into whatever consumes the draw (measured on a 2-core x86 machine: about
200 ms instead of 2 ms for a [32, 32, 128] dropout mask, of which the base
model draws 13 per step; the three Gumbel weights of a PAR block were even
recomputed for every element they scale). These functions ask for Philox
by name on TensorFlow and use `keras.random` on other backends; the numbers
are just as random, and `Dropout` is a drop-in `keras.layers.Dropout` (same
arguments, same seed-generator state).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from partf.serialization import register


def uniform(
    shape: tuple[int, ...],
    seed: keras.random.SeedGenerator | int | None,
    minval: float = 0.0,
    maxval: float = 1.0,
    dtype: str = "float32",
) -> Any:
    """Uniform draws in [minval, maxval), fast under XLA with a seed generator.

    Args:
        shape: shape of the result.
        seed: the caller's own `keras.random.SeedGenerator` (advanced by one
            draw); an int or None goes to `keras.random.uniform` unchanged.
        minval: lower bound (included).
        maxval: upper bound (excluded).
        dtype: float dtype of the result.

    Returns:
        [*shape] uniform samples.

    Example:
        >>> u = uniform((2, 3), keras.random.SeedGenerator(0))
        >>> tuple(u.shape)
        (2, 3)
    """
    if keras.backend.backend() != "tensorflow" or not isinstance(seed, keras.random.SeedGenerator):
        return keras.random.uniform(shape, minval, maxval, dtype=dtype, seed=seed)
    import tensorflow as tf

    state = seed.next()
    # TensorFlow's stateless ops take an int32 pair; the generator holds int64.
    pair = tf.cast(tf.math.floormod(state, tf.int32.max - 1), tf.int32)
    return tf.random.stateless_uniform(shape, pair, minval, maxval, dtype=dtype, alg="philox")


def dropout(
    x: Any,
    rate: float,
    seed: keras.random.SeedGenerator,
    noise_shape: tuple[int | None, ...] | None = None,
) -> Any:
    """Zeroes each entry of `x` with probability `rate`, scales the rest by 1 / (1 - rate).

    Args:
        x: [...] any float tensor.
        rate: drop probability in [0, 1).
        seed: the caller's own `keras.random.SeedGenerator`.
        noise_shape: shape of the mask, broadcast over `x` (None entries take
            `x`'s size); None: one draw per entry.

    Returns:
        Tensor of `x`'s shape and dtype.
    """
    if rate <= 0:
        return x
    shape = tuple(ops.shape(x))  # ints where static
    if noise_shape is not None:
        shape = tuple(s if n is None else n for s, n in zip(shape, noise_shape, strict=True))
    keep = uniform(shape, seed) >= rate
    return ops.where(keep, x * ops.cast(1.0 / (1.0 - rate), x.dtype), ops.zeros_like(x))


@register
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with the mask drawn by `dropout` (fast under XLA).

    Same arguments and behaviour as `keras.layers.Dropout`: `rate`,
    `noise_shape`, `seed`; active only when called with `training=True`.

    Example:
        >>> layer = Dropout(0.5, seed=1)
        >>> y = layer(keras.ops.ones((4, 8)), training=True)
        >>> set(keras.ops.convert_to_numpy(y).ravel().tolist()) <= {0.0, 2.0}
        True
    """

    def call(self, inputs: Any, training: bool = False) -> Any:
        if training and self.rate > 0:
            return dropout(inputs, self.rate, self.seed_generator, self.noise_shape)
        return inputs
