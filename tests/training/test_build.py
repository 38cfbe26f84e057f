"""Building a run's model (`partf.training.build`): compiled, its optimizer's and
metrics' variables made before the first step (so a checkpoint can be restored into
them), the state groups a checkpoint holds, the full configuration, the precision
policy, and the settings refused before anything is built."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

from partf.training.build import build_model
from partf.training.config import ConfigError, TrainConfig
from partf.training.splits import RunData
from tests.training.helpers import BATCH, VOCAB, resolved

MODEL = dict(d_model=16, num_heads=2, d_ffn=24, num_layers=2, mem_len=4, cutoffs=(20,))


def build(valid_split, **changes):
    config = TrainConfig(
        **{"train_directory": "records", "jit_compile": False, "warmup_steps": 1, **changes}
    )
    data = RunData(valid_split, None, None, VOCAB, total_steps=6)
    model_config = resolved(config, data, BATCH)
    return config, model_config, build_model(config, model_config, data, None)


def test_the_model_is_built_compiled_and_ready_to_restore(valid_split):
    config, model_config, built = build(
        valid_split, model={**MODEL, "architecture": "A D"}, spike_guard="skip"
    )
    model = built.model
    assert model.compiled and built.model_config is model_config
    # Adam's moments exist before any step: a checkpoint's arrays have somewhere to go.
    assert len(model.optimizer.variables) > 1 + len(model.trainable_variables)
    groups = built.state_groups()
    assert list(groups) == ["model", "optimizer", "metrics", "guard"]
    assert groups["model"] == list(model.variables)
    assert groups["optimizer"] == list(model.optimizer.variables)
    assert groups["guard"] == built.model.spike_guard.variables
    assert built.full_config == {
        "model": model_config.to_dict(),
        "training": config.training_dict(),
    }
    assert built.schedule.value_at(1) == pytest.approx(config.max_lr)


def test_without_the_spike_guard_a_checkpoint_holds_no_guard(valid_split):
    _, _, built = build(valid_split, model={**MODEL, "architecture": "A D"})
    assert built.model.spike_guard is None and "guard" not in built.state_groups()


def test_mixed_precision_computes_in_the_devices_half_type(valid_split):
    half = "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"
    try:
        _, _, built = build(
            valid_split, model={**MODEL, "architecture": "A D"}, mixed_precision=True
        )
        assert keras.mixed_precision.global_policy().name == half
        assert built.model.dtype_policy.name == half
        build(valid_split, model={**MODEL, "architecture": "A D"})
        assert keras.mixed_precision.global_policy().name == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_a_sampled_search_under_xla_on_tensorflow_is_refused(valid_split):
    with pytest.raises(ConfigError, match=r"^--search_estimator=sampled cannot be compiled"):
        build(valid_split, model={**MODEL, "search_estimator": "sampled"}, jit_compile=True)
