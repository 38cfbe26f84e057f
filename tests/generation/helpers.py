"""The tiny models and the full-pass reference shared by the generation tests."""

from __future__ import annotations

import numpy as np
from keras import ops

from partf.models import PARTransformerXL

VOCAB = 40
TINY = dict(
    vocab_size=VOCAB,
    d_model=16,
    num_heads=2,
    d_ffn=32,
    num_layers=2,
    cutoffs=(12,),
    dropout_rate=0.1,  # must be off in generation
    batch_size=3,
    eval_mode="expected",  # every candidate contributes, deterministically
)
LENGTH = 8


def with_random_arch(model: PARTransformerXL) -> PARTransformerXL:
    # Zero logits mix candidates equally; random ones make each block different.
    rng = np.random.default_rng(5)
    for var in model.arch_variables:
        var.assign(rng.normal(size=var.shape).astype("float32"))
    return model


def full_pass_log_probs(model: PARTransformerXL, tokens: np.ndarray) -> np.ndarray:
    """One forward over the whole sequence: [B, T, V] next-token log-probabilities."""
    hidden, _ = model.forward(tokens, model.initial_state(tokens.shape[0]), training=False)
    return ops.convert_to_numpy(model.log_probs(hidden))
