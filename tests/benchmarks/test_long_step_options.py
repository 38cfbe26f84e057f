"""benchmarks/long_step_options.py: the variants that claim to compute the layer's attention
do, so the timings compare like with like; the wrong-on-purpose ones differ."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.attention.relative import RelativeAttention
from tests.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def options():
    return load_benchmark("long_step_options")


@pytest.fixture(scope="module")
def setup():
    keras.utils.set_random_seed(0)
    layer = RelativeAttention(d_model=16, num_heads=2, mem_len=6, causal=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    memory = rng.normal(size=(2, 6, 16)).astype("float32")
    mask = np.ones((2, 6), "int32")
    y, _ = layer(x, state={"memory": memory, "memory_mask": mask})
    return layer, x, memory, mask, keras.ops.convert_to_numpy(y)


@pytest.mark.parametrize("variant", ["nopad", "fusekv", "headsfirst"])
def test_a_same_attention_variant_matches_the_layer(options, setup, variant):
    layer, x, memory, mask, expected = setup
    got = keras.ops.convert_to_numpy(options.variant_call(layer, x, memory, mask, variant))
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["noshift", "nopos"])
def test_a_wrong_on_purpose_variant_differs(options, setup, variant):
    layer, x, memory, mask, expected = setup
    got = keras.ops.convert_to_numpy(options.variant_call(layer, x, memory, mask, variant))
    assert np.max(np.abs(got - expected)) > 1e-3
