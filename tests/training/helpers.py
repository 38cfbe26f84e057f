"""A tiny fixed Transformer-XL saved as a finished run, for the tests of what reads one
(`--init_from`, `--drop_attention`); and the trainer's tiny runs on learnable records, for
the tests of the trainer and of what a run leaves (`partf.training.results`), with
`interrupted_and_whole` for the tests that a resumed run ends like an uninterrupted one."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from partf.models.config import ModelConfig
from partf.models.par_transformer_xl import PARTransformerXL
from partf.serialization import FORMAT_VERSION
from partf.training.config import TrainConfig
from partf.training.resolve import resolve_for_run as resolved  # noqa: F401 (tests import it)

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


def markov_stream(num_tokens: int, seed: int) -> np.ndarray:
    """Token ids 1..TRAIN_VOCAB-1 from a sparse first-order Markov chain: learnable text."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(1, TRAIN_VOCAB, size=(TRAIN_VOCAB, 3))
    stream = np.empty(num_tokens, np.int32)
    stream[0] = 1
    choices = rng.integers(0, 3, size=num_tokens)
    for t in range(1, num_tokens):
        stream[t] = successors[stream[t - 1], choices[t]]
    return stream


def train_config(records, out, **changes) -> TrainConfig:
    """A tiny run on `records` (the `trainer_records` fixture) writing to `out`."""
    root, tokenizer = records
    values = dict(
        train_directory=str(root / "train"),
        valid_directory=str(root / "valid"),
        test_directory=str(root / "test"),
        sp_model_prefix=tokenizer,
        model_name="tiny",
        output_dir=str(out),
        epochs=2,
        max_lr=3e-3,
        warmup_steps=4,
        steps_per_execution=4,
        log_every=2,
        plot_every=8,
        ckpt_every=5,
        eval_every=10,
        model=dict(TINY),
    )
    values.update(changes)
    return TrainConfig(**values)


def tensorboard_scalars(folder) -> dict:
    """{tag: [(step, value)]} of a TensorBoard folder (value None for text and images)."""
    accumulator = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    accumulator.Reload()
    values = {}
    for tag in accumulator.Tags()["tensors"]:
        events = accumulator.Tensors(tag)
        if events and events[0].tensor_proto.dtype != tf.string.as_datatype_enum:
            values[tag] = [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events]
        else:
            values[tag] = [(e.step, None) for e in events]
    return values


class SigintAt(keras.callbacks.Callback):
    """Sends SIGINT to this process at the first execution ending past `batch`."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch
        self.sent = False

    def on_train_batch_end(self, batch, logs=None):
        if batch >= self.batch and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


@dataclasses.dataclass
class Interrupted:
    """An uninterrupted run and the same run stopped by SIGINT, then resumed."""

    whole: TrainConfig
    whole_results: dict
    split: TrainConfig
    resumed_results: dict
    stopped: Any  # the TrainingInterrupted the stopped run raised
    checkpoints: list  # (step, path) of the stopped run's checkpoints before it resumed


def interrupted_and_whole(records, tmp_path_factory, **changes) -> Interrupted:
    """Trains `train_config(records, ..., **changes)` once through, and once stopped by
    SIGINT at the first execution past batch 1 and resumed from its checkpoint."""
    from partf.training.trainer import RunPaths, TrainingInterrupted, train

    whole = train_config(records, tmp_path_factory.mktemp("whole"), **changes)
    whole_results = train(whole)
    split = train_config(records, tmp_path_factory.mktemp("split"), **changes)
    try:
        train(split, callbacks=[SigintAt(batch=1)])
    except TrainingInterrupted as error:
        stopped = error
    else:
        raise AssertionError("the run was not stopped by SIGINT")
    checkpoints = RunPaths(Path(split.output_dir), split.model_name).folder.checkpoints()
    return Interrupted(whole, whole_results, split, train(split), stopped, checkpoints)
