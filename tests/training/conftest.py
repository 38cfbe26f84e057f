"""Fixtures of the training tests: a saved source run and a validation split, built once
per module that uses them (no training, no XLA)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from partf.training.splits import Split
from tests.training.helpers import BATCH, LENGTH, VOCAB, build, finished_run


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A trained-looking source: `A D A D` with random weights, LayerNorms moved off their
    initial values so that a copied norm differs from a fresh one."""
    model = build("A D A D", seed=1)
    rng = np.random.default_rng(0)
    for variable in model.trainable_weights:
        if "gamma" in variable.path or "beta" in variable.path or "bias" in variable.path:
            variable.assign(rng.normal(size=variable.shape).astype("float32"))
    folder = finished_run(tmp_path_factory.mktemp("runs") / "source", model)
    return model, folder


@pytest.fixture(scope="module")
def valid_split():
    rng = np.random.default_rng(3)
    batches = rng.integers(1, VOCAB, size=(3, BATCH, LENGTH + 1)).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((batches[:, :, :-1], batches[:, :, 1:]))
    return Split(dataset, len(batches), BATCH, LENGTH, VOCAB, {})
