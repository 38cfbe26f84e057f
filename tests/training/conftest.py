"""Fixtures of the training tests: a saved source run and a validation split, built once
per module that uses them (no training, no XLA); and the trainer's records and its one
XLA-compiled run (about 30 s), made once per session for test_trainer.py and
test_results.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from partf.training.splits import Split
from tests.training.helpers import (
    BATCH,
    LENGTH,
    TRAIN_VOCAB,
    VOCAB,
    build,
    finished_run,
    markov_stream,
    train_config,
)


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


@pytest.fixture(scope="session")
def trainer_records(tmp_path_factory):
    """Record folders with metadata (vocabulary 200, batches 8 x 16): train (12 batches),
    train6 (6), valid (3), test (3)."""
    from partf.data import context_batches, write_tfrecords

    root = tmp_path_factory.mktemp("records")
    for name, num_batches, seed in (
        ("train", 12, 0),
        ("train6", 6, 0),
        ("valid", 3, 1),
        ("test", 3, 2),
    ):
        stream = markov_stream(num_batches * 8 * 16 + 1, seed)
        write_tfrecords(
            context_batches(stream, 8, 16),
            root / name,
            vocab_size=TRAIN_VOCAB,
            num_tokens=len(stream),
            num_lines=40 * num_batches,
            num_words=80 * num_batches,
            num_chars=600 * num_batches,
        )
    return root, ""


@pytest.fixture(scope="session")
def trained_run(trainer_records, tmp_path_factory):
    """One XLA-compiled run: 2 epochs of 12 batches, 4 steps per execution, pi frozen for
    the first epoch."""
    from partf.training.trainer import RunPaths, train

    config = train_config(trainer_records, tmp_path_factory.mktemp("run"), arch_freeze_steps=12)
    results = train(config)
    return config, results, RunPaths(Path(config.output_dir), "tiny")
