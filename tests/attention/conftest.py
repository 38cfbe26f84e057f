"""Fixtures of the attention tests."""

from __future__ import annotations

import keras
import pytest

import partf.attention.eva
import partf.attention.lara
import partf.attention.performer
from tests.attention.helpers import FixedNoise

#: Modules that draw their normal noise through `partf.random.normal`.
_DRAWING_MODULES = (partf.attention.eva, partf.attention.lara, partf.attention.performer)


@pytest.fixture
def fixed_noise(monkeypatch) -> FixedNoise:
    """The mechanisms' normal draws (`partf.random.normal`, and `keras.random.normal`)
    replaced by fixed draws (one per shape) for the test."""
    noise = FixedNoise()

    def normal_draws(shape, seed=None, mean=0.0, stddev=1.0, dtype="float32"):
        return noise(shape, mean, stddev, dtype, seed)

    monkeypatch.setattr(keras.random, "normal", noise)
    for module in _DRAWING_MODULES:
        monkeypatch.setattr(module, "normal_draws", normal_draws)
    return noise
