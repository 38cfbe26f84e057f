"""A tiny saved model and partf-generate's one error line, for the tests of partf-generate
and of how it finds a model and its tokenizer (`partf.cli.loading`)."""

from __future__ import annotations

import keras
import numpy as np

PROMPT = "the game was released"
TINY = dict(
    d_model=16,
    num_heads=2,
    d_ffn=32,
    num_layers=2,
    mem_len=8,
    cutoffs=(20,),
    batch_size=4,
    eval_mode="expected",
)


def error_line(capsys) -> str:
    """The one error line; fails if there is not exactly one, or a traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("partf-generate: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def tiny_model(vocab_size: int, seed: int):
    from partf.models import PARTransformerXL

    keras.utils.set_random_seed(seed)
    model = PARTransformerXL(TINY, vocab_size=vocab_size, name="tiny")
    rng = np.random.default_rng(seed)
    for var in model.arch_variables:
        var.assign(rng.normal(size=var.shape).astype("float32"))
    return model
