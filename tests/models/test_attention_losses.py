"""Losses an attention adds (`Attention.adds_loss`, `loss_name`): they join the causal
model's loss and its logs by what the mechanism declares, never by its registry name, and
nothing of a step is kept on the model between its call, loss and metrics."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from partf.attention import register_attention
from partf.attention.linear import LinearAttention
from partf.attention.primal import PrimalAttention
from partf.models import ModelConfig, PARTransformerXL

TINY = dict(vocab_size=40, d_model=8, num_heads=2, d_ffn=16, mem_len=4, cutoffs=(), batch_size=2)


@register_attention("test_loss_linear")
class LossyLinear(LinearAttention):
    """Linear attention that adds a loss of its own: the mean square of its output."""

    loss_name = "output_energy"

    def call(self, x, state=None, mask=None, training=None):
        y, new_state = super().call(x, state=state, mask=mask, training=training)
        self.add_loss(0.5 * ops.mean(ops.square(ops.cast(y, "float32"))))
        return y, new_state


@register_attention("test_renamed_primal")
class RenamedPrimal(PrimalAttention):
    """Primal attention under another registry name: its KSVD term is still reported."""


def _tokens():
    return np.random.default_rng(0).integers(1, 40, size=(2, 7)).astype("int32")


def _model(architecture, **options):
    keras.utils.set_random_seed(3)
    config = ModelConfig(
        **TINY, num_layers=2, architecture=architecture, dropout_rate=0.0,
        attention_options=options,
    )  # fmt: skip
    return PARTransformerXL(config)


def test_a_new_mechanism_declaring_a_loss_joins_the_loss_and_the_logs():
    model = _model("test_loss_linear D")
    (layer,) = model.loss_attentions
    assert isinstance(layer, LossyLinear) and layer.adds_loss()
    x = _tokens()
    hidden = model(x, training=True)
    (term,) = layer.losses
    data = model.token_nll(hidden, x)
    want = float(np.asarray(ops.sum(data) / np.count_nonzero(x)) + np.asarray(term))
    got = float(np.asarray(model.compute_loss(x, x, hidden, training=True)))
    assert float(np.asarray(term)) > 0
    np.testing.assert_allclose(got, want, rtol=1e-6)
    model.compile(optimizer=keras.optimizers.SGD(0.0), jit_compile=False)
    model.reset_state()  # the step starts from the same (empty) memory
    logs = model.train_on_batch(x, x, return_dict=True)
    assert "ksvd_loss" not in logs
    np.testing.assert_allclose(logs["output_energy"], float(np.asarray(term)), rtol=1e-5)


def test_a_primal_under_another_name_reports_its_ksvd_term():
    model = _model("test_renamed_primal D", low_rank=3, eta=0.5)
    (layer,) = model.loss_attentions
    model.forward(_tokens(), model.initial_state(2), training=True)
    want = float(np.asarray(layer.losses[0]))
    model.compile(optimizer=keras.optimizers.SGD(0.0), jit_compile=False)
    logs = model.train_on_batch(_tokens(), _tokens(), return_dict=True)
    assert want > 0
    np.testing.assert_allclose(logs["ksvd_loss"], want, rtol=1e-5)


def test_a_primal_without_eta_adds_no_loss():
    model = _model("primal D", low_rank=3, eta=0.0)
    assert model.loss_attentions == []
    model(_tokens(), training=True)
    assert model.losses == []


@pytest.mark.parametrize("estimator", ["mixture", "sampled"])
def test_nothing_of_a_step_is_kept_on_the_model(estimator):
    """The drawn path's log pi comes out of the call, the KSVD term is read from the
    step's layers: the model holds no hand-off attributes, before or after training."""
    config = ModelConfig(
        **TINY, num_layers=2, attention="primal", search_estimator=estimator,
        attention_options={"low_rank": 3, "eta": 0.5},
    )  # fmt: skip
    model = PARTransformerXL(config)
    x = _tokens()
    out = model(x, training=True)
    if estimator == "sampled":
        assert set(out) == {"hidden", "path_log_probs"} and len(out["path_log_probs"]) == 2
    else:
        assert not isinstance(out, dict)
    # Evaluation returns the hidden states alone, whatever the search.
    assert tuple(model(x, training=False).shape) == (2, 7, 8)
    for name in ("_path_log_probs", "_ksvd_loss"):
        assert not hasattr(model, name)
