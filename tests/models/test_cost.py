"""What a search pays: FLOPs as counted, or the measured time of a run's cost table."""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from partf.models import ModelConfig, PARTransformerXL
from partf.models.cost import (
    candidate_flops,
    cost_key,
    expected_cost,
    expected_flops,
    measured_costs,
    search_costs,
)

TABLE = {"relative": 3.0, "norm": 1.25, "local": 2.0, "dense": 0.5, "identity": 0.0}


def search(**fields) -> PARTransformerXL:
    values = dict(
        vocab_size=24, d_model=16, num_heads=2, d_ffn=32, num_layers=4, mem_len=0,
        cutoffs=(), batch_size=2, dropout_rate=0.0, search_cost_weight=0.1,
        architecture="relative|norm|local D norm|relative D",
    )  # fmt: skip
    values.update(fields)
    return PARTransformerXL(ModelConfig(**values))


def test_time_cost_is_pi_dot_the_measured_table():
    model = search(search_cost="time", candidate_costs=TABLE)
    pis = [np.asarray(ops.convert_to_numpy(block.pi()), np.float64) for block in model.blocks]
    names = [[cost_key(k, m) for k, m in block.kinds] for block in model.blocks]
    assert names == [["relative", "norm", "local"], ["dense"], ["norm", "relative"], ["dense"]]
    want = sum(
        float(p @ np.array([TABLE[n] for n in ns])) for p, ns in zip(pis, names, strict=True)
    )
    assert float(ops.convert_to_numpy(expected_cost(model, 8))) == pytest.approx(want, rel=1e-6)
    assert measured_costs(model)[0] == [3.0, 1.25, 2.0]


def test_flops_cost_is_the_counted_megaflops():
    model = search()
    got = float(ops.convert_to_numpy(expected_cost(model, 8)))
    assert got == pytest.approx(float(ops.convert_to_numpy(expected_flops(model, 8))) / 1e6)
    assert search_costs(model, 8)[0] == [c / 1e6 for c in candidate_flops(model, 8)[0]]


def test_a_table_without_a_candidate_is_refused_naming_it():
    model = search(search_cost="time", candidate_costs={"relative": 1.0, "dense": 0.5})
    with pytest.raises(ValueError, match="no norm, local") as caught:
        expected_cost(model, 8)
    assert "\n" not in str(caught.value)


def test_the_time_cost_trains_the_logits_towards_the_cheaper_mixer():
    # With only the cost in the loss, gradient descent on the logits lowers pi of the
    # dearest candidate (relative, 3.0) and raises the cheapest (norm, 1.25).
    import tensorflow as tf

    model = search(search_cost="time", candidate_costs=TABLE)
    logits = [v for v in model.trainable_variables if "arch_logits" in v.path]
    with tf.GradientTape() as tape:
        cost = expected_cost(model, 8)
    grads = tape.gradient(cost, logits)
    first = np.asarray(grads[0])
    assert first[0] > 0 > first[1]  # relative dearer than the mean, norm cheaper


def test_unknown_search_cost_is_refused():
    with pytest.raises(ValueError, match="unknown search_cost 'watts'"):
        ModelConfig(vocab_size=24, cutoffs=(), search_cost="watts")
