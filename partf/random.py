"""Random draws that stay cheap under XLA: uniform noise, dropout, a Dropout layer.

`keras.random` on TensorFlow draws with the "auto_select" stateless algorithm, which
under XLA on a CPU is about 100 times slower than named Philox (about 200 ms instead of
2 ms for a [32, 32, 128] dropout mask on a 2-core x86 machine), and even named Philox
cost a quarter of a base training step in dropout masks. `random_bits` instead hashes
each element's index with a per-draw key (three rounds of the lowbias32 mixer on uint32):
plain `keras.ops` arithmetic that XLA fuses into the op consuming the mask, so a mask
costs about as much as reading the tensor it masks. Being integer arithmetic, the draws
are also the same eager, in a graph, under XLA and on every backend, which TensorFlow's
stateless generators are not (tests/models/test_par_transformer_xl.py checks that a run
with `jit_compile` samples the same Gumbel weights). `Dropout` is a drop-in
`keras.layers.Dropout`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
from keras import ops

from partf.serialization import register


def uniform(
    shape: tuple[int, ...],
    seed: keras.random.SeedGenerator | int | None,
    minval: float = 0.0,
    maxval: float = 1.0,
    dtype: str = "float32",
) -> Any:
    """[*shape] uniform draws in [minval, maxval), from `random_bits` with `seed`, the
    caller's own `keras.random.SeedGenerator` (advanced by one draw); an int or None
    goes to `keras.random.uniform` unchanged.
    """
    if not isinstance(seed, keras.random.SeedGenerator):
        return keras.random.uniform(shape, minval, maxval, dtype=dtype, seed=seed)
    # The top 24 bits of the hash: k / 2**24 is exact in float32, and below 1.
    bits = ops.right_shift(random_bits(shape, seed), np.uint32(8))
    unit = ops.cast(bits, "float32") * np.float32(2.0**-24)
    return ops.cast(minval + (maxval - minval) * unit, dtype)


def normal(
    shape: tuple[int, ...],
    seed: keras.random.SeedGenerator | int | None,
    mean: float = 0.0,
    stddev: float = 1.0,
    dtype: str = "float32",
) -> Any:
    """[*shape] normal draws by the Box-Muller transform of two `uniform` draws, so the
    numbers are the same eagerly, in a graph and under XLA, on every backend
    (TensorFlow's own normal draws change under XLA). `seed` as for `uniform` (advanced
    by two draws; an int or None goes to `keras.random.normal`)."""
    if not isinstance(seed, keras.random.SeedGenerator):
        return keras.random.normal(shape, mean, stddev, dtype=dtype, seed=seed)
    # 1 - u lies in (0, 1], so the logarithm is finite.
    radius = ops.sqrt(-2.0 * ops.log(1.0 - uniform(shape, seed)))
    angle = np.float32(2.0 * np.pi) * uniform(shape, seed)
    return ops.cast(mean + stddev * radius * ops.cos(angle), dtype)


# lowbias32 (C. Wellons' hash-prospector): a bijection of uint32 with near-ideal
# avalanche (each input bit flips each output bit with probability close to 1/2).
_MIX_1 = np.uint32(0x7FEB352D)
_MIX_2 = np.uint32(0x846CA68B)
_GOLDEN = np.uint32(0x9E3779B9)  # odd: multiplying by it permutes uint32


def _mix(x: Any) -> Any:
    x = ops.bitwise_xor(x, ops.right_shift(x, np.uint32(16)))
    x = ops.multiply(x, _MIX_1)
    x = ops.bitwise_xor(x, ops.right_shift(x, np.uint32(15)))
    x = ops.multiply(x, _MIX_2)
    return ops.bitwise_xor(x, ops.right_shift(x, np.uint32(16)))


#: Keys of the open `keyed_draws` scopes (innermost last), each with its draw count.
_SCOPES: list[list[Any]] = []


@contextlib.contextmanager
def keyed_draws(key: Any) -> Iterator[None]:
    """Draws inside read their generators' state without advancing it, keyed by `key`.

    A JAX conditional branch cannot assign a variable (its value would escape the
    branch's trace), and advancing a `SeedGenerator` assigns its state. Inside this
    scope `random_bits` instead mixes `key` (drawn once outside the conditional, so
    fresh each step) and a count of the draws made in the scope into the key of each
    draw, so every generator still gives fresh, independent draws per step, per layer
    and per element, and no state is written. `key`: a uint32 (or int) scalar tensor,
    e.g. `ops.cast(generator.next(), "uint32")[1]`; None: no scope.

    Example:
        >>> gen = keras.random.SeedGenerator(3)
        >>> with keyed_draws(7):
        ...     bits = random_bits((2,), gen)
        >>> int(keras.ops.convert_to_numpy(gen.state)[1])  # not advanced
        0
    """
    if key is None:
        yield
        return
    _SCOPES.append([ops.cast(key, "uint32"), 0])
    try:
        yield
    finally:
        _SCOPES.pop()


def _draw_state(seed: keras.random.SeedGenerator) -> Any:
    """uint32 [2]: the draw's (seed, count) pair: advanced, or keyed within a scope."""
    if not _SCOPES:
        return ops.cast(seed.next(), "uint32")  # [initial seed, draws so far], mod 2**32
    scope = _SCOPES[-1]
    scope[1] += 1  # two draws from one generator within the scope differ
    state = ops.cast(seed.state.value, "uint32")
    count = _mix(ops.add(ops.multiply(scope[0], _GOLDEN), np.uint32(scope[1])))
    return ops.stack([state[0], ops.bitwise_xor(state[1], count)])


def random_bits(shape: tuple[int, ...], seed: keras.random.SeedGenerator) -> Any:
    """uint32 [*shape] random bits (`shape`: ints, or scalar tensors for dynamic
    dimensions), each a keyed hash of its element index: every bit 0 or 1 with probability
    1/2, independent across elements, draws and seeds as far as statistical tests see.
    `seed`, the caller's own `keras.random.SeedGenerator`, is advanced by one draw; its
    state (initial seed, draw count) gives the draw's keys. Inside `keyed_draws` it is
    read, not advanced, and the scope's key joins in.
    """
    state = _draw_state(seed)
    key_1 = _mix(ops.add(_mix(state[0]), ops.multiply(state[1], _GOLDEN)))
    key_2 = _mix(ops.bitwise_xor(key_1, _GOLDEN))
    size = 1
    for dim in shape:  # ints, or scalar tensors where a dimension is not static
        size = size * dim
    index = ops.cast(ops.arange(size, dtype="int32"), "uint32")
    bits = _mix(ops.add(_mix(ops.bitwise_xor(index, key_1)), key_2))
    return ops.reshape(_mix(ops.bitwise_xor(bits, key_1)), shape)


def dropout(
    x: Any,
    rate: float,
    seed: keras.random.SeedGenerator,
    noise_shape: tuple[int | None, ...] | None = None,
) -> Any:
    """Zeroes each entry of the float tensor `x` with probability `rate` in [0, 1), scales
    the rest by 1 / (1 - rate). `seed`: the caller's own `keras.random.SeedGenerator`;
    `noise_shape`: the mask's shape, broadcast over `x` (None entries take `x`'s size;
    None: one draw per entry)."""
    if rate <= 0:
        return x
    shape = tuple(ops.shape(x))  # ints where static
    if noise_shape is not None:
        shape = tuple(s if n is None else n for s, n in zip(shape, noise_shape, strict=True))
    # P(bits >= threshold) = 1 - threshold / 2**32 = 1 - rate, to 2**-32.
    threshold = np.uint32(min(round(rate * 2.0**32), 2**32 - 1))
    keep = ops.greater_equal(random_bits(shape, seed), threshold)
    return ops.where(keep, x * ops.cast(1.0 / (1.0 - rate), x.dtype), ops.zeros_like(x))


@register
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with the mask drawn by `dropout` (fast under XLA).

    Same arguments and behaviour as `keras.layers.Dropout`: `rate`,
    `noise_shape`, `seed`; active only when called with `training=True`.
    """

    def call(self, inputs: Any, training: bool = False) -> Any:
        if training and self.rate > 0:
            return dropout(inputs, self.rate, self.seed_generator, self.noise_shape)
        return inputs
