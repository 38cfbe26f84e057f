"""A tiny fixed Transformer-XL saved as a finished run, for the tests of what reads one
(`--init_from`, `--drop_attention`)."""

from __future__ import annotations

import json

import keras

from partf.models.config import ModelConfig
from partf.models.par_transformer_xl import PARTransformerXL
from partf.serialization import FORMAT_VERSION

VOCAB, BATCH, LENGTH = 64, 2, 6

#: The trainer's tiny model (vocabulary `TRAIN_VOCAB`), for its runs and the
#: configurations the checkpoint tests compare.
TRAIN_VOCAB = 200
TINY = {
    "d_model": 16,
    "num_heads": 2,
    "d_ffn": 32,
    "num_layers": 2,
    "mem_len": 8,
    "cutoffs": (50, 120),
}
SIZES = dict(vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=24, mem_len=4, cutoffs=(20,))


def build(architecture: str, seed: int = 0, **changes) -> PARTransformerXL:
    keras.utils.set_random_seed(seed)
    layers = len(architecture.split())
    config = ModelConfig(
        **{**SIZES, **changes}, num_layers=layers, architecture=architecture, batch_size=BATCH
    )
    model = PARTransformerXL(config, name="par_transformer_xl")
    model.build((BATCH, LENGTH))
    return model


def finished_run(folder, model, name: str = "source"):
    """`folder` as a finished partf-train run leaves it: results.json and <name>.keras."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps({"format": FORMAT_VERSION, "model_name": name}))
    model.save(folder / f"{name}.keras")
    return folder
