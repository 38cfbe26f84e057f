"""Primal-Attention against an independent reference of the authors' causal form, and its
KSVD loss."""

import numpy as np
import pytest

from partf.attention import create_attention, get_attention_class
from partf.attention.primal import PrimalAttention
from tests.attention import references
from tests.attention.helpers import (
    assert_causal,
    assert_finite_on_large_inputs,
    assert_matches_reference,
    assert_segments_equal_one_call,
    numpy_state,
    random_tokens,
)
from tests.layer_checks import assert_config_round_trip


def weights_of(layer):
    """Every trainable weight, under the name the reference takes it."""
    found = {
        "query_kernel": layer.query_dense.kernel,
        "key_kernel": layer.key_dense.kernel,
        "w_e": layer.w_e,
        "w_r": layer.w_r,
        "lambda": layer.lam,
        "combine_kernel": layer.combine.kernel,
        "combine_bias": layer.combine.bias,
        "output_kernel": layer.output_dense.kernel,
    }
    if layer.use_bias:
        found.update(
            query_bias=layer.query_dense.bias,
            key_bias=layer.key_dense.bias,
            output_bias=layer.output_dense.bias,
        )
    return found


@pytest.mark.parametrize("start", ["carried", "empty"])
@pytest.mark.parametrize("batch,length,heads,dim,rank", [(1, 7, 1, 4, 3), (2, 23, 3, 4, 5)])
def test_matches_reference_with_ksvd_loss(batch, length, heads, dim, rank, start):
    """The output, the KSVD loss, the running sums and the gradients (input and every
    weight, through the output and the loss) equal the reference's."""
    layer = PrimalAttention(heads * dim, heads, low_rank=rank, eta=0.3, use_bias=True, seed=2)
    layer.build((None, None, heads * dim))
    rng = np.random.default_rng(3)
    for bias in (layer.query_dense.bias, layer.key_dense.bias, layer.combine.bias):
        bias.assign(rng.normal(size=bias.shape).astype("float32"))
    x, mask = random_tokens(batch, length, heads * dim)
    mask[:, 0] = True  # the loss averages over real tokens: keep at least one
    state = numpy_state(layer.get_initial_state(batch))
    if start == "carried":
        state = {
            name: rng.normal(size=value.shape).astype("float32") for name, value in state.items()
        }

    def run_layer(x):
        y, new_state = layer(x, state=state, mask=mask)
        assert len(layer.losses) == 1
        return {"y": y, "loss": layer.losses[0]}, new_state

    def run_reference(x, **weights):
        return references.primal({"eta": layer.eta}, weights, x, state, mask)

    assert_matches_reference(run_layer, run_reference, {"x": x}, weights_of(layer))


def test_eta_zero_adds_no_loss_and_no_value_weights():
    layer = PrimalAttention(8, 2, low_rank=3, eta=0.0)
    x, mask = random_tokens(1, 5, 8)
    layer(x, mask=mask)
    assert layer.losses == []
    # Values are never read: no value projection to train.
    assert not any("value" in w.path for w in layer.weights)


def test_segments_equal_one_call():
    layer = create_attention("primal", 12, 3, low_rank=4)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


def test_causal():
    layer = create_attention("primal", 12, 3, low_rank=4)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("primal", {"low_rank": 4})


def test_config_round_trip_and_validation():
    assert get_attention_class("primal") is PrimalAttention
    layer = PrimalAttention(12, 3, low_rank=7, eta=0.25, seed=4, dropout_rate=0.1)
    clone = assert_config_round_trip(layer)
    assert (clone.low_rank, clone.eta, clone.seed) == (7, 0.25, 4)
    with pytest.raises(ValueError, match="low_rank must be positive"):
        PrimalAttention(12, 3, low_rank=0)
    with pytest.raises(ValueError, match="eta must be >= 0"):
        PrimalAttention(12, 3, eta=-1.0)
