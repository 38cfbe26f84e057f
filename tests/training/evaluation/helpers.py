"""A tiny fixed Transformer-XL and three batches to score, and a small model fitted on
MQAR, for the evaluator tests."""

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


#: A small MQAR task: 4 pairs asked in 64 tokens (distances up to 63: three of the
#: default buckets), vocabulary 16, batches of 4 rows.
MQAR = dict(
    seq_len=64, pairs=(4,), vocab_size=16, batch_size=4, train_examples=256, eval_examples=32
)


def trained_mqar_model(mem_len: int = 0, seed: int = 0) -> PARTransformerXL:
    """A model fitted for one pass over MQAR's 64 training batches (a few seconds):
    it has learned to answer with values, not yet to recall, so about one answer in five
    is right, spread over every distance."""
    from partf.tasks.mqar import MQARSettings, draw_split

    inputs, targets = draw_split(MQARSettings(**MQAR), "train")
    keras.utils.set_random_seed(seed)
    model = PARTransformerXL(
        vocab_size=16, d_model=16, num_heads=2, d_ffn=32, num_layers=2, mem_len=mem_len,
        cutoffs=(8,), batch_size=4, dropout_rate=0.0, architecture="A D",
    )  # fmt: skip
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    model.fit(
        inputs.reshape(-1, inputs.shape[-1]),
        targets.reshape(-1, inputs.shape[-1]),
        batch_size=4,
        shuffle=False,
        verbose=0,
    )
    return model
