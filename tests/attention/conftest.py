"""Fixtures of the attention tests."""

from __future__ import annotations

import keras
import pytest

from tests.attention.helpers import FixedNoise


@pytest.fixture
def fixed_noise(monkeypatch) -> FixedNoise:
    """`keras.random.normal` replaced by fixed draws (one per shape) for the test."""
    noise = FixedNoise()
    monkeypatch.setattr(keras.random, "normal", noise)
    return noise
