"""A tiny fixed Transformer-XL and three batches to score, for the evaluator tests."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from partf.models import PARTransformerXL

B, L, V = 4, 6, 40
MODEL = dict(
    vocab_size=V, d_model=8, num_heads=2, d_ffn=16, num_layers=2, mem_len=4, cutoffs=(),
    batch_size=B, architecture="A D",
)  # fmt: skip


def tiny_model(seed: int = 0) -> PARTransformerXL:
    """Built (in the current strategy's scope), with memory carried between batches."""
    keras.utils.set_random_seed(seed)
    model = PARTransformerXL(**MODEL)
    model(np.ones((B, L), np.int32))
    return model


def batches(count: int = 3) -> tf.data.Dataset:
    """`count` (inputs, targets) batches of one token stream per row."""
    tokens = np.random.default_rng(0).integers(1, V, size=(count, B, L + 1)).astype("int32")
    return tf.data.Dataset.from_tensor_slices((tokens[:, :, :-1], tokens[:, :, 1:]))
