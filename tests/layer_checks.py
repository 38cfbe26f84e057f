"""Checks every partf layer gets: config round trip and .keras serialization."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np


def assert_config_round_trip(layer: keras.layers.Layer) -> keras.layers.Layer:
    """`from_config(get_config())` rebuilds a layer with the same config.

    Build `layer` with non-default arguments so that a forgotten one shows.
    """
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"].startswith("partf>"), serialized["registered_name"]
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is type(layer)
    assert restored.get_config() == config
    return clone


#: The gap between 1.0 and the next float32: a float32 rounding is at most half of it,
#: relative to the value rounded.
FLOAT32_EPS = float(np.finfo(np.float32).eps)


def float32_atol(operations: int, magnitude: float = 1.0, ulps: float = 2.0) -> float:
    """The absolute tolerance for two float32 computations of the same values that round
    in another order: `ulps` float32 units of `magnitude` for each of the `operations`
    accumulated (the terms of a sum, the steps of a recurrence) between inputs and result.

    Two such computations (chunked against whole, compiled against eager, one CPU's
    kernels against another's, oneDNN on or off) each stay within about operations x
    eps/2 of the exact sum of terms of that magnitude (Higham, "Accuracy and Stability of
    Numerical Algorithms", 2nd ed., section 4.2), so they agree to this on any IEEE
    machine; a tolerance read off one machine's difference need not (issue 48).

    Args:
        operations: roundings accumulated into one result element.
        magnitude: the largest size of the terms summed (for an average of values, the
            largest value), e.g. `np.abs(values).max()`.
        ulps: float32 units allowed per operation.
    """
    return ulps * operations * FLOAT32_EPS * float(magnitude)


def assert_close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(actual),
        keras.ops.convert_to_numpy(expected),
        rtol=rtol,
        atol=atol,
    )
