"""partf.models.backbone: the stack a ModelConfig describes, and its pure causal pass."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from partf.models import ModelConfig, PARTransformerXL
from partf.models.backbone import Backbone

V, B = 30, 2
CONFIG = dict(vocab_size=V, d_model=8, num_heads=2, d_ffn=16, cutoffs=(), batch_size=B)


def test_from_model_config_builds_the_config_stack():
    config = ModelConfig(
        **CONFIG,
        num_layers=2,
        mem_len=3,
        clamp_len=5,
        position="learned",
        max_positions=20,
        arch_parameterization="probabilities",
    )
    backbone = Backbone(config, name="stack")
    assert backbone.name == "stack" and backbone.causal
    assert len(backbone.blocks) == 2 and backbone.position_embedding is not None
    for block in backbone.blocks:
        assert block.candidates == config.candidates and block.causal
        assert block.settings == config.block_settings
        assert block.settings.mem_len == 3 and block.settings.clamp_len == 5
        assert block.settings.arch_parameterization == "probabilities"
    other = Backbone(config.replace(position="none"), seed=7)
    assert other.blocks[1].seed == 8 and other.position_embedding is None


@pytest.mark.parametrize("position", ["none", "sinusoidal", "learned"])
def test_forward_is_pure_and_is_the_models(position):
    """`forward` writes no variable, continues the stream position it is given, and is
    what the model's `forward` runs."""
    config = ModelConfig(
        **CONFIG,
        num_layers=2,
        mem_len=3,
        attention="softmax",
        position=position,
        max_positions=40,
        dropout_rate=0.0,
    )
    model = PARTransformerXL(config)
    backbone = model.backbone
    before = [np.array(v.numpy()) for v in model.variables]
    x = np.random.default_rng(0).integers(1, V, size=(B, 6)).astype("int32")
    states = backbone.initial_state(B)
    hidden, states, log_probs = backbone.forward(x, states, tau=model.tau())
    hidden2, states2, _ = backbone.forward(x, states, tau=model.tau())
    assert log_probs == []
    for variable, value in zip(model.variables, before, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value, err_msg=variable.path)
    want, want_states = model.forward(x, model.initial_state(B))
    np.testing.assert_array_equal(ops.convert_to_numpy(hidden), ops.convert_to_numpy(want))
    flat = [ops.convert_to_numpy(s) for s in keras.tree.flatten(states)]
    for got, wanted in zip(flat, keras.tree.flatten(want_states), strict=True):
        np.testing.assert_array_equal(got, ops.convert_to_numpy(wanted))
    if backbone.absolute_positions:
        _, position_state = backbone.split_position_state(states2)
        assert ops.convert_to_numpy(position_state).tolist() == [12, 12]
        # The second segment is later in the stream: not the first one's output.
        assert not np.allclose(ops.convert_to_numpy(hidden2), ops.convert_to_numpy(hidden))


def test_resolve_choices_checks_each_block():
    backbone = Backbone(ModelConfig(**CONFIG, num_layers=2, mem_len=2))
    assert backbone.resolve_choices(None) == [None, None]
    assert backbone.resolve_choices((0, None)) == [0, None]
    with pytest.raises(ValueError, match="choices has 1 entries but the model 2 blocks"):
        backbone.resolve_choices([0])
    with pytest.raises(ValueError, match=r"choices\[1\] = 3 but block 1 has 3 candidates"):
        backbone.resolve_choices([0, 3])
