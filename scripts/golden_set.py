"""Records the numbers of a few tiny models, to check a refactoring changes none of them.

    python scripts/golden_set.py record /tmp/golden.npz    # before the change
    python scripts/golden_set.py compare /tmp/golden.npz   # after it: bit for bit

For each of a fixed causal model ("A D A D"), a causal search (architecture None, among
attention, dense and identity), a fixed masked language model and an encoder search with
a classification head, each built after `keras.utils.set_random_seed(0)`, it records:
the outputs of an evaluation call and of a training call on fixed inputs, the training
loss, the gradient of every trainable weight (keyed by its path, less the model's name),
pi, the loss of each of 10 `train_on_batch` steps (compiled without XLA, with the
optimizer partf-train builds) and every weight afterwards.

`compare` rebuilds everything and asserts `np.array_equal` on every array: the check is
for the same machine (another CPU or oneDNN setting may round differently). It prints
one line per differing array and exits 1 if there is any, else prints how many arrays
matched.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

VOCAB = 40
BATCH = 2
LENGTH = 8
STEPS = 10


# The Encoder's settings before it took ModelConfig's defaults (issue 48), so that the
# encoders recorded before and after are the same models.
ENCODER_SETTINGS = dict(attention="softmax", position="sinusoidal", max_positions=2048)


def _tokens(seed: int, rows: int = BATCH, length: int = LENGTH) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, VOCAB, size=(rows, length)).astype("int32")


def _causal(architecture: str | None) -> Any:
    from partf.models import ModelConfig, PARTransformerXL

    config = ModelConfig(
        vocab_size=VOCAB,
        d_model=16,
        num_heads=2,
        d_ffn=32,
        num_layers=4,
        mem_len=4,
        cutoffs=(20,),
        batch_size=BATCH,
        architecture=architecture,
        candidates=("attention", "dense", "identity"),
        tau_steps=STEPS,
    )
    return PARTransformerXL(config, name="golden")


def _mlm() -> Any:
    from partf.models import MaskedLanguageModel

    return MaskedLanguageModel(
        vocab_size=VOCAB,
        d_model=16,
        num_heads=2,
        d_ffn=32,
        architecture="A D A D",
        **ENCODER_SETTINGS,
        name="golden",
    )


def _encoder_search() -> Any:
    from partf.models import Encoder

    return Encoder(
        vocab_size=VOCAB,
        d_model=16,
        num_heads=2,
        d_ffn=32,
        candidates=("attention", "dense", "identity"),
        num_layers=3,
        num_classes=3,
        tau_steps=STEPS,
        seed=1,
        **ENCODER_SETTINGS,
        name="golden",
    )


def _batches(kind: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(inputs, targets) of each step: the first is also the one scored and differentiated."""
    out = []
    for step in range(STEPS):
        tokens = _tokens(100 + step, length=LENGTH + 1)
        if kind == "causal":
            out.append((tokens[:, :-1], tokens[:, 1:]))
        elif kind == "mlm":
            chosen = np.random.default_rng(200 + step).random(tokens[:, :-1].shape) < 0.3
            targets = np.where(chosen, tokens[:, :-1], 0).astype("int32")
            inputs = np.where(chosen, 1, tokens[:, :-1]).astype("int32")
            out.append((inputs, targets))
        else:  # classes
            out.append((tokens[:, :-1], (tokens[:, 0] % 3).astype("int32")))
    return out


def _key(variable: Any, model: Any) -> str:
    prefix = f"{model.name}/"
    path = variable.path
    return path[len(prefix) :] if path.startswith(prefix) else path


def _loss(model: Any, kind: str, x: Any, y: Any, outputs: Any) -> Any:
    if kind == "classes":
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, outputs)
    return model.compute_loss(x=x, y=y, y_pred=outputs, training=True)


def _record_model(name: str, build: Callable[[], Any], kind: str) -> dict[str, np.ndarray]:
    from partf.training.config import TrainConfig

    keras.utils.set_random_seed(0)
    model = build()
    batches = _batches(kind)
    x, y = batches[0]
    found: dict[str, np.ndarray] = {}
    found["eval_output"] = _numpy(model(x, training=False))
    with tf.GradientTape() as tape:
        outputs = model(x, training=True)
        loss = _loss(model, kind, x, y, outputs)
    found["train_output"] = _numpy(outputs)
    found["loss"] = np.asarray(loss)
    variables = model.trainable_variables
    for variable, grad in zip(variables, tape.gradient(loss, variables), strict=True):
        if grad is not None:
            # An embedding's gradient comes as IndexedSlices: made dense.
            found[f"grad/{_key(variable, model)}"] = np.asarray(tf.convert_to_tensor(grad))
    if model.config.is_stochastic:
        found["pi"] = np.asarray(model.pi())
    _, optimizer = TrainConfig(max_lr=1e-3, warmup_steps=2).schedule_and_optimizer(STEPS)
    if kind == "classes":
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=False,
        )
    else:
        model.compile(optimizer=optimizer, jit_compile=False)
    losses = [model.train_on_batch(bx, by, return_dict=True)["loss"] for bx, by in batches]
    found["trajectory"] = np.asarray(losses, dtype="float64")
    for variable in model.variables:
        found[f"after/{_key(variable, model)}"] = np.asarray(variable)
    if "pi" in found:
        found["pi_after"] = np.asarray(model.pi())
    return {f"{name}/{key}": value for key, value in found.items()}


def _numpy(outputs: Any) -> np.ndarray:
    if isinstance(outputs, dict):  # a sampled-path search's training output
        outputs = outputs["hidden"]
    return np.asarray(outputs)


MODELS = {
    "fixed": (lambda: _causal("A D A D"), "causal"),
    "search": (lambda: _causal(None), "causal"),
    "mlm": (_mlm, "mlm"),
    "encoder_search": (_encoder_search, "classes"),
}


def golden_set() -> dict[str, np.ndarray]:
    """Every recorded array, by "<model>/<what>"."""
    import partf  # noqa: F401  (registers the partf objects)

    found: dict[str, np.ndarray] = {}
    for name, (build, kind) in MODELS.items():
        found.update(_record_model(name, build, kind))
    return found


def compare(path: str) -> int:
    with np.load(path, allow_pickle=False) as data:
        recorded = {key: data[key] for key in data.files}
    now = golden_set()
    problems = [f"missing now: {key}" for key in sorted(set(recorded) - set(now))]
    problems += [f"new now: {key}" for key in sorted(set(now) - set(recorded))]
    for key in sorted(set(recorded) & set(now)):
        before, after = recorded[key], now[key]
        if before.shape != after.shape or before.dtype != after.dtype:
            problems.append(f"{key}: {before.dtype}{before.shape} -> {after.dtype}{after.shape}")
        elif not np.array_equal(before, after):
            worst = float(np.max(np.abs(before.astype("float64") - after.astype("float64"))))
            problems.append(f"{key}: differs (largest difference {worst:.3g})")
    for line in problems:
        print(line)
    if problems:
        print(f"golden set: {len(problems)} of {len(recorded)} arrays differ")
        return 1
    print(f"golden set: all {len(recorded)} arrays bit-identical")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("record", "compare"))
    parser.add_argument("path", help="the .npz file of the golden set")
    args = parser.parse_args(argv)
    if args.command == "record":
        found = golden_set()
        np.savez(args.path, **found)
        print(f"golden set: {len(found)} arrays written to {args.path}")
        return 0
    return compare(args.path)


if __name__ == "__main__":
    sys.exit(main())
