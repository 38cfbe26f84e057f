"""Checkpoints restore by variable path: any creation order, another model name, colliding
paths in order, one-line refusals."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.models import ModelConfig, PARTransformerXL
from partf.run_folder import RunFolder
from partf.training.checkpoint import (
    CheckpointError,
    CheckpointManager,
    restore_variables,
    saved_paths,
    saved_root,
    variable_key,
)


def _saved(tmp_path, groups, **meta):
    CheckpointManager(tmp_path).save(1, groups, meta=meta)
    arrays, meta, _ = RunFolder(tmp_path).newest_checkpoint()
    return arrays, meta


def _randomize(variables, seed=0):
    rng = np.random.default_rng(seed)
    for v in variables:
        if "float" in str(v.dtype):
            v.assign(rng.normal(size=v.shape).astype(v.dtype))


def _tiny(name=None):
    config = ModelConfig(
        vocab_size=30, d_model=8, num_heads=2, d_ffn=16, num_layers=2, mem_len=4,
        cutoffs=(), batch_size=2, dropout_rate=0.1,
    )  # fmt: skip
    return PARTransformerXL(config, name=name)


class _Two(keras.Model):
    """Two named layers, made in the order `order` gives."""

    def __init__(self, order=("first", "second"), **kwargs):
        super().__init__(**kwargs)
        for name in order:
            setattr(self, name, keras.layers.Dense(3, name=name))
        for name in order:
            getattr(self, name).build((None, 2))


def test_another_creation_order_and_another_model_name_restore_by_path(tmp_path):
    saved_model = _Two(("first", "second"), name="saved")
    _randomize(saved_model.variables)
    arrays, meta = _saved(tmp_path, {"model": saved_model.variables})
    live = _Two(("second", "first"), name="live")
    assert live.variables[0] is live.second.kernel  # made first here, second there
    restore_variables(
        live.variables, arrays["model"], "model", saved_paths(meta, "model"),
        root="live", saved_model_root=saved_root(meta),
    )  # fmt: skip
    for name in ("first", "second"):
        pairs = zip(getattr(live, name).weights, getattr(saved_model, name).weights, strict=True)
        for got, want in pairs:
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_a_shuffled_model_and_optimizer_restore_with_other_numbered_names(tmp_path):
    """Keras numbers unnamed models, optimizers and seed generators per process: a second
    model's names differ, and its variables, listed in another order (sorted by key; the
    seed generators whose keys collide keep their order among themselves), are restored
    all the same."""
    model = _tiny()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    x = np.random.default_rng(0).integers(1, 30, size=(2, 9)).astype("int32")
    model.fit(x[:, :-1], x[:, 1:], batch_size=2, epochs=1, verbose=0)
    groups = {"model": model.variables, "optimizer": model.optimizer.variables}
    arrays, meta = _saved(tmp_path, groups, model_name=model.name)

    other = _tiny()
    other.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    other.optimizer.build(other.trainable_variables)
    assert other.name != model.name and other.optimizer.name != model.optimizer.name
    keys = {"root": other.name, "saved_model_root": saved_root(meta)}
    live = {
        group: sorted(variables, key=lambda v, g=group: variable_key(v.path, g, other.name))
        for group, variables in (
            ("model", other.variables), ("optimizer", other.optimizer.variables)
        )
    }  # fmt: skip
    assert [v.path for v in live["model"]] != [v.path for v in other.variables]
    for group in live:
        restore_variables(
            live[group], arrays[group], group, saved_paths(meta, group), **keys
        )  # fmt: skip
        for got, want in zip(getattr_variables(other, group), groups[group], strict=True):
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=want.path)


def getattr_variables(model, group):
    return model.variables if group == "model" else model.optimizer.variables


def test_keys_drop_the_model_and_optimizer_names_and_seed_numbers():
    assert variable_key("run/block_0/norm_0/gamma", "model", "run") == "block_0/norm_0/gamma"
    assert variable_key("block_0/arch_logits", "model", "run") == "block_0/arch_logits"
    assert (
        variable_key("adam_3/run_block_0_norm_0_gamma_momentum", "optimizer", "run")
        == "block_0_norm_0_gamma_momentum"
    )
    assert variable_key("seed_generator_12/seed_generator_state", "model", "run") == (
        "seed_generator/seed_generator_state"
    )
    assert variable_key("loss/total", "metrics", "run") == "loss/total"


def test_colliding_paths_are_matched_in_order_among_themselves(tmp_path):
    generators = [keras.random.SeedGenerator(seed) for seed in (1, 2, 3)]
    weight = keras.Variable(np.ones(2, "float32"), name="weight")
    arrays, meta = _saved(tmp_path, {"model": [generators[0].state, weight, *(
        g.state for g in generators[1:])]})  # fmt: skip
    fresh = [keras.random.SeedGenerator(0) for _ in range(3)]
    fresh_weight = keras.Variable(np.zeros(2, "float32"), name="weight")
    live = [fresh_weight, *(g.state for g in fresh)]
    assert len({variable_key(v.path, "model", None) for v in live[1:]}) == 1  # they collide
    restore_variables(live, arrays["model"], "model", saved_paths(meta, "model"))
    for got, want in zip(fresh, generators, strict=True):
        np.testing.assert_array_equal(got.state.numpy(), want.state.numpy())
    np.testing.assert_array_equal(fresh_weight.numpy(), weight.numpy())
    with pytest.raises(CheckpointError, match=r"not in this run: seed_generator/seed_gen"):
        restore_variables(live[:-1], arrays["model"], "model", saved_paths(meta, "model"))


def test_missing_and_extra_variables_are_refused_in_one_line_with_the_fix(tmp_path):
    saved_model = _Two(("first", "second"), name="m")
    arrays, meta = _saved(tmp_path, {"model": saved_model.variables})
    live = _Two(("first", "third"), name="m")
    before = [v.numpy().copy() for v in live.variables]
    with pytest.raises(CheckpointError) as caught:
        restore_variables(
            live.variables, arrays["model"], "model", saved_paths(meta, "model"), root="m"
        )
    message = str(caught.value)
    assert "\n" not in message
    assert "not saved: third/kernel, third/bias" in message
    assert "not in this run: second/kernel, second/bias" in message
    assert message.endswith("pass the run's flags, or start a new --output_dir.")
    for got, want in zip(live.variables, before, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)  # nothing half restored
