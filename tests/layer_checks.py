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


def assert_close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(actual),
        keras.ops.convert_to_numpy(expected),
        rtol=rtol,
        atol=atol,
    )
