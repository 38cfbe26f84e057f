"""`ProjectionNet`, EVA's and LARA's proposal map: LayerNorm(x W + b) over the head
width, its sub-layers attributes of the owning layer (so Keras tracks and saves them)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.attention.projection_net import ProjectionNet
from tests.attention.helpers import to_np

DIM = 4


def randomised(net: ProjectionNet, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for layer in (net.dense, net.norm):
        for weight in layer.weights if layer is not None else ():
            weight.assign(rng.normal(size=weight.shape).astype("float32"))


@pytest.mark.parametrize("norm", [True, False], ids=["norm", "no-norm"])
def test_is_a_dense_map_then_a_layer_norm_held_by_its_owner(norm):
    owner = keras.layers.Layer()
    net = ProjectionNet(owner, DIM, "project_q", norm=norm)
    randomised(net)
    assert owner.project_q_dense is net.dense
    assert hasattr(owner, "project_q_norm") == norm
    assert len(owner.trainable_weights) == (4 if norm else 2)
    x = np.random.default_rng(1).normal(size=(2, 3, DIM)).astype("float32")
    want = x.astype("float64") @ to_np(net.dense.kernel) + to_np(net.dense.bias)
    if norm:
        mean, var = want.mean(-1, keepdims=True), want.var(-1, keepdims=True)
        want = (want - mean) / np.sqrt(var + 1e-5) * to_np(net.norm.gamma) + to_np(net.norm.beta)
    np.testing.assert_allclose(to_np(net(x)), want, rtol=1e-5, atol=1e-5)


def test_computes_in_the_owners_precision_and_answers_float32():
    owner = keras.layers.Layer(dtype="mixed_bfloat16")
    net = ProjectionNet(owner, DIM, "project_k")
    x = np.random.default_rng(2).normal(size=(2, DIM)).astype("float32")
    y = net(x)
    assert net.dense.compute_dtype == "bfloat16" and net.dense.kernel.dtype == "float32"
    assert y.dtype == "float32"
    full = ProjectionNet(keras.layers.Layer(), DIM, "project_k")
    full.dense.set_weights(net.dense.get_weights())
    full.norm.set_weights(net.norm.get_weights())
    np.testing.assert_allclose(to_np(y), to_np(full(x)), atol=0.05)
