"""What a search shows of itself (`SearchInterface`): the Gumbel temperature at the
model's step, and pi with one column per candidate name any block has."""

from __future__ import annotations

import numpy as np
import pytest

from partf.models.config import ModelConfig
from partf.models.par_transformer_xl import PARTransformerXL

SEARCH = ModelConfig(
    vocab_size=60, d_model=16, num_heads=2, d_ffn=32, num_layers=2, mem_len=5, cutoffs=(10, 30),
    tau_steps=100, batch_size=2,
)  # fmt: skip


def test_tau_follows_the_step():
    net = PARTransformerXL(SEARCH, tau_schedule="linear", tau_start=1.0, tau_end=0.5)
    net.step.assign(50)
    assert float(net.tau()) == pytest.approx(0.75)
    trainable = PARTransformerXL(SEARCH, tau_is_trainable=True, tau_start=0.8)
    assert float(trainable.tau()) == pytest.approx(0.8)
    assert any("log_tau" in w.path for w in trainable.trainable_weights)


def test_pi_of_searched_blocks_has_a_column_per_name():
    """'A|I D|I norm': one column per name any block has, zeros where a block lacks it,
    a one-hot row for the fixed block."""
    config = ModelConfig(
        vocab_size=60,
        d_model=8,
        num_heads=2,
        d_ffn=8,
        num_layers=3,
        mem_len=2,
        cutoffs=(),
        architecture="A|I D|I norm",
        batch_size=2,
    )
    model = PARTransformerXL(config)
    model.build((2, 4))
    model.blocks[1].arch_logits.assign([0.0, np.log(3.0)])
    assert model.candidate_names == ["attention", "identity", "dense", "norm"]
    np.testing.assert_allclose(
        model.pi(), [[0.5, 0.5, 0, 0], [0, 0.75, 0.25, 0], [0, 0, 0, 1]], rtol=1e-6
    )
    assert model.architecture_string() == "A I norm"
