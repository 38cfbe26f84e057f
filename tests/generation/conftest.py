"""Fixtures of the generation tests: one model and one text, built once for the folder."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.models import PARTransformerXL
from tests.generation.helpers import LENGTH, TINY, VOCAB, with_random_arch


@pytest.fixture(scope="package")
def relative_model() -> PARTransformerXL:
    keras.utils.set_random_seed(11)
    # Memory longer than any sequence here, so carried state sees everything.
    return with_random_arch(PARTransformerXL(TINY, attention="relative", mem_len=16))


@pytest.fixture(scope="package")
def tokens() -> np.ndarray:
    return np.random.default_rng(0).integers(1, VOCAB, (2, LENGTH)).astype("int32")
