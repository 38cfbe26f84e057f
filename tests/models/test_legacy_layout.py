"""partf.models.legacy_layout: its copy of Keras's weights walk matches what `model.save`
writes, and a file in a legacy layout loads into a restructured model."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import h5py
import keras
import numpy as np
import pytest

from partf.models import Encoder, ModelConfig, PARTransformerXL
from partf.models.legacy_layout import (
    LegacyLayoutLoading,
    LegacyView,
    own_variables,
    translate,
    variable_paths,
)
from partf.models.masked_lm import MaskedLanguageModel

SMALL = dict(vocab_size=30, d_model=8, num_heads=2, d_ffn=16)


def _models() -> dict[str, keras.Model]:
    return {
        "causal": PARTransformerXL(
            ModelConfig(**SMALL, num_layers=3, architecture="A D I", mem_len=4, cutoffs=(10,))
        ),
        "causal_search": PARTransformerXL(ModelConfig(**SMALL, num_layers=2, cutoffs=(10,))),
        "encoder": Encoder(
            **SMALL, architecture="A D I A", position="learned", max_positions=16, num_classes=3
        ),
        "encoder_search": Encoder(
            **SMALL, candidates=("softmax", "dense", "identity"), num_layers=2, num_classes=3
        ),
        "mlm": MaskedLanguageModel(**SMALL, architecture="A D"),
    }


def _saved_datasets(path) -> dict[str, np.ndarray]:
    with zipfile.ZipFile(path) as archive:
        data = archive.read("model.weights.h5")
    with h5py.File(io.BytesIO(data), "r") as f:
        out: dict[str, np.ndarray] = {}
        f.visititems(
            lambda key, obj: (
                out.__setitem__(key, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return out


@pytest.mark.parametrize("name", ["causal", "causal_search", "encoder", "encoder_search", "mlm"])
def test_the_walk_is_where_model_save_puts_each_variable(name, tmp_path):
    """Every dataset `model.save` writes (uncompiled: layers only) is the value of the
    variable `variable_paths` places there, and every layer variable is placed once."""
    model = _models()[name]
    for i, variable in enumerate(model.weights):  # distinct values: a swap shows
        rng = np.random.default_rng(i)
        if variable.dtype.startswith("float"):
            variable.assign(rng.normal(size=variable.shape).astype(variable.dtype))
    model.save(tmp_path / "m.keras")
    saved = _saved_datasets(tmp_path / "m.keras")
    walked = {path: variable for path, variable in variable_paths(model).values()}
    assert sorted(walked) == sorted(saved)
    for path, variable in walked.items():
        np.testing.assert_array_equal(saved[path], keras.ops.convert_to_numpy(variable), path)
    assert {id(v) for v in walked.values()} == {id(v) for v in model.weights}


# --------------------------------------------------------------------- translation
class _Inner(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(4, name="dense")
        self.norm = keras.layers.LayerNormalization(name="norm")

    def build(self, input_shape=None):
        self.dense.build((None, 3))
        self.norm.build((None, 4))
        self.built = True

    def call(self, x):
        return self.norm(self.dense(x))


class _Flat(keras.Model):
    """The legacy layout: the layers are the model's attributes."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(4, name="dense")
        self.norm = keras.layers.LayerNormalization(name="norm")
        self.scale = self.add_weight(shape=(4,), initializer="ones", name="scale")
        self.dense.build((None, 3))
        self.norm.build((None, 4))
        self.built = True

    def call(self, x):
        return self.norm(self.dense(x)) * self.scale


class _Moved(LegacyLayoutLoading, keras.Model):
    """The same layers, moved under a `backbone` layer."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.backbone = _Inner(name="backbone")
        self.scale = self.add_weight(shape=(4,), initializer="ones", name="scale")
        self.backbone.build()
        self.built = True

    def call(self, x):
        return self.backbone(x) * self.scale

    def legacy_view(self) -> LegacyView:
        inner = self.backbone
        attrs = [
            ("dense", inner.dense),
            ("norm", inner.norm),
            ("layers", [inner.dense, inner.norm]),
        ]
        return LegacyView(attrs, own_variables(self))


def test_a_legacy_weights_file_loads_into_the_moved_layers(tmp_path):
    keras.utils.set_random_seed(0)
    flat = _Flat()
    for variable in flat.weights:
        variable.assign(np.random.default_rng(len(variable.path)).normal(size=variable.shape))
    x = np.random.default_rng(1).normal(size=(2, 3)).astype("float32")
    flat.save_weights(tmp_path / "flat.weights.h5")
    moved = _Moved()
    moved.load_weights(tmp_path / "flat.weights.h5")
    np.testing.assert_allclose(moved(x), flat(x), rtol=0, atol=0)
    # Saved again, the file has the new layout and loads as it is.
    moved.save_weights(tmp_path / "moved.weights.h5")
    with h5py.File(tmp_path / "moved.weights.h5", "r") as f:
        assert "backbone" in f and "dense" not in f
    again = _Moved()
    again.load_weights(tmp_path / "moved.weights.h5")
    np.testing.assert_allclose(again(x), flat(x), rtol=0, atol=0)


def test_a_view_that_does_not_account_for_the_file_fails_loudly(tmp_path):
    _Flat().save_weights(tmp_path / "flat.weights.h5")
    moved = _Moved()
    inner = moved.backbone
    with h5py.File(tmp_path / "flat.weights.h5", "r") as f:
        view = LegacyView([("dense", inner.dense)], own_variables(moved))
        with pytest.raises(ValueError, match="no legacy place"):
            translate(f, moved, view)
        layers = [inner.dense, inner.norm]
        view = LegacyView([("dense", [inner.dense]), ("layers", layers)], own_variables(moved))
        with pytest.raises(ValueError, match="not placed: \\['dense/vars/0'"):
            translate(f, moved, view)


# ------------------------------------------------------------- the legacy views
LEGACY_KERAS = Path(__file__).resolve().parents[1] / "fixtures" / "legacy" / "keras"


@pytest.mark.parametrize("name", ["fixed", "search", "encoder", "encoder_search", "mlm"])
def test_a_legacy_view_places_every_variable_where_the_legacy_file_has_it(name):
    """`legacy_view()` of the restructured model walks to exactly the datasets a file of
    the earlier layout holds (tests/fixtures/legacy: written before the backbone), each
    of its variable's shape."""
    path = LEGACY_KERAS / f"{name}.keras"
    if not path.exists():
        pytest.skip(f"legacy fixture {path} is absent")
    model = keras.saving.load_model(path, compile=False)
    saved = {
        key: value
        for key, value in _saved_datasets(path).items()
        if not key.startswith(("optimizer/", "metrics/"))
    }
    walked = {path: variable for path, variable in variable_paths(model.legacy_view()).values()}
    assert sorted(walked) == sorted(saved)
    for key, variable in walked.items():
        assert tuple(variable.shape) == saved[key].shape, key
    assert {id(v) for v in walked.values()} == {id(v) for v in model.weights}


def test_the_causal_model_keeps_its_legacy_variable_order():
    """A .keras file stores the optimizer's slots by position in `trainable_variables`,
    and checkpoints match colliding seed-generator keys in `variables` order: both keep
    the order of the model before the backbone (embedding, temperature, blocks, adaptive
    softmax, position table last), here with every optional part present."""
    model = PARTransformerXL(
        ModelConfig(
            **SMALL,
            num_layers=2,
            mem_len=4,
            cutoffs=(10,),
            position="learned",
            max_positions=32,
            tau_is_trainable=True,
            search_estimator="sampled",
        )
    )
    backbone = model.backbone
    layers = [backbone.embedding, backbone.input_dropout, model.temperature]
    layers += [*backbone.blocks, model.output_layer, backbone.position_embedding]
    expected = [v.path for layer in layers for v in layer.trainable_variables]
    assert [v.path for v in model.trainable_variables] == expected
    assert expected[0].endswith("backbone/embedding/embeddings")
    assert expected[1].endswith("temperature/log_tau")
    assert expected[-1].endswith("backbone/position_embedding/embeddings")
    expected = [v.path for v in model._trainable_variables + model._non_trainable_variables]
    expected += [v.path for layer in layers for v in layer.variables]
    assert [v.path for v in model.variables] == expected
    assert model.variables[0] is model.step
    assert any(v is model.search_baseline for v in model.variables)
    # The same variables as Keras's own listing, only ordered.
    listed = keras.Model.variables.fget(model)
    assert sorted(id(v) for v in listed) == sorted(id(v) for v in model.variables)
    listed = keras.Model.weights.fget(model)
    assert sorted(id(v) for v in listed) == sorted(id(v) for v in model.weights)


def test_a_causal_model_saved_in_the_new_layout_loads_as_it_is(tmp_path):
    """Saved after the backbone, the file has the new layout (no translation) and loads
    to the same outputs."""
    config = ModelConfig(
        **SMALL, num_layers=2, mem_len=4, cutoffs=(10,), position="learned", max_positions=32
    )
    model = PARTransformerXL(config)
    for i, variable in enumerate(model.weights):
        if variable.dtype.startswith("float"):
            variable.assign(np.random.default_rng(i).normal(size=variable.shape) * 0.1)
    model.save_weights(tmp_path / "m.weights.h5")
    with h5py.File(tmp_path / "m.weights.h5", "r") as f:
        assert "backbone" in f and "blocks" not in f and "embedding" not in f
    again = PARTransformerXL(config)
    again.load_weights(tmp_path / "m.weights.h5")
    x = np.random.default_rng(0).integers(1, 30, size=(config.batch_size, 5)).astype("int32")
    want, _ = model.forward(x, model.initial_state(config.batch_size))
    got, _ = again.forward(x, again.initial_state(config.batch_size))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want))
