"""One decorator that registers every partf layer and model with Keras."""

from __future__ import annotations

from typing import TypeVar

import keras

T = TypeVar("T")

PACKAGE = "partf"


def register(cls: T) -> T:
    """Registers `cls` as Keras-serializable under the `partf` package.

    Every layer and model in partf uses this, so a saved `.keras` file names
    its classes as `partf>ClassName` and loads without `custom_objects`.
    """
    return keras.saving.register_keras_serializable(package=PACKAGE)(cls)
