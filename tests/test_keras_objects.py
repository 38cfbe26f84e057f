"""`import partf` alone lets `keras.saving.load_model` read anything partf saves: a model
saved compiled by partf-train's optimizer and schedule, the same model uncompiled, and a
plain Keras model holding a partf attention layer. Each file is loaded in a fresh
interpreter that imports nothing of partf but the package, before or after Keras; and
`import partf` itself imports neither Keras nor TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys

import keras
import numpy as np

LOAD = """
import json, sys
if sys.argv[3] == "partf first":
    import partf
import keras, numpy as np
import partf
out = {}
for name, path in json.loads(sys.argv[1]).items():
    model = keras.saving.load_model(path)
    x = np.asarray(json.loads(sys.argv[2])[name], "int32" if name != "layer" else "float32")
    y = model(x, training=False)
    y = y[0] if isinstance(y, (list, tuple)) else y
    out[name] = [type(model).__name__, type(getattr(model, "optimizer", None)).__name__,
                 np.asarray(y).tolist()]
print(json.dumps(out))
"""


def test_import_partf_is_enough_to_load_what_partf_saved(tmp_path):
    from partf.attention import create_attention
    from partf.models import PARTransformerXL
    from partf.training.config import TrainConfig

    tokens = np.random.default_rng(0).integers(1, 50, size=(2, 5)).astype("int32")
    compiled = PARTransformerXL(
        vocab_size=50, d_model=8, num_heads=2, d_ffn=16, num_layers=2, mem_len=4,
        cutoffs=(20,), batch_size=2, attention="eva", position="rotary",
        attention_options={"window_size": 4, "chunk_size": 2},
    )  # fmt: skip
    _, optimizer = TrainConfig(arch_lr=1e-2).schedule_and_optimizer(100)
    compiled.compile(optimizer=optimizer)
    compiled.fit(tokens, tokens, verbose=0)
    compiled.reset_state()
    plain = PARTransformerXL(compiled.config.replace(attention="fastformer", position="learned"))

    inputs = keras.Input((6, 8))
    y, _ = create_attention("performer", 8, 2, num_features=4, rotary=True)(inputs)
    layer_model = keras.Model(inputs, y)
    features = np.random.default_rng(1).normal(size=(1, 6, 8)).astype("float32")

    files, feeds, want = {}, {}, {}
    for name, model, x in (
        ("compiled", compiled, tokens),
        ("plain", plain, tokens),
        ("layer", layer_model, features),
    ):
        files[name] = str(tmp_path / f"{name}.keras")
        model.save(files[name])
        feeds[name] = x.tolist()
        want[name] = np.asarray(model(x, training=False))
    for order in ("partf first", "keras first"):
        done = subprocess.run(
            [sys.executable, "-c", LOAD, json.dumps(files), json.dumps(feeds), order],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (order, done.stderr[-3000:])
        loaded = json.loads(done.stdout.strip().splitlines()[-1])
        assert loaded["compiled"][:2] == ["PARTransformerXL", "ArchSplitOptimizer"]
        assert loaded["plain"][0] == "PARTransformerXL"
        for name, (_, _, values) in loaded.items():
            np.testing.assert_allclose(np.asarray(values), want[name], rtol=1e-5, atol=1e-6)


def test_import_partf_loads_neither_keras_nor_tensorflow():
    """So partf-build-data and the scripts stay fast and print their one-line errors
    without TensorFlow's start-up messages."""
    check = (
        "import sys, partf; print(sorted(m for m in ('keras', 'tensorflow') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_registered_partf_class_has_a_stand_in():
    """The declarations read from the source name every class partf registers, under its
    defining module (a class registered otherwise than by its decorator would be
    missing)."""
    import importlib
    import pkgutil

    import partf
    from partf.declarations import declared

    for module in pkgutil.walk_packages(partf.__path__, "partf."):
        importlib.import_module(module.name)
    registered = {
        key.split(">", 1)[1]: value.__module__
        for key, value in keras.saving.get_custom_objects().items()
        # Classes only: names still held by stand-ins, and those tests register, aside.
        if key.startswith("partf>") and isinstance(value, type)
        and value.__module__.startswith("partf.")
    }  # fmt: skip
    assert registered == declared().saved
