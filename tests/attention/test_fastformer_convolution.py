"""Fastformer's causal convolution (`convolve`): against a direct convolution written
tap by tap with the full (block-diagonal) weight matrix, across segment boundaries too,
and inside the layer, in both forms: the seed's (layer norm, no bias, no activation;
against tests/attention/references.py) and partf's first (bias, then GELU)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention
from partf.attention.fastformer import FastformerAttention, causal_convolution
from tests.attention import references
from tests.attention.helpers import (
    assert_causal,
    assert_segments_equal_one_call,
    random_tokens,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


def full_weights(kernel: np.ndarray) -> np.ndarray:
    """[K, G, D/G, D/G] grouped kernel -> [K, D, D] with zeros between the groups."""
    taps, groups, width, _ = kernel.shape
    full = np.zeros((taps, groups * width, groups * width))
    for g in range(groups):
        block = slice(g * width, (g + 1) * width)
        full[:, block, block] = kernel[:, g]
    return full


def convolution_reference(stream: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """y_t = bias + sum_i x_{t - K + 1 + i} W_i over one whole stream, x_s = 0 for s < 0."""
    weights = full_weights(np.asarray(kernel, np.float64))
    taps = weights.shape[0]
    batch, length, width = stream.shape
    out = np.zeros((batch, length, width))
    for t in range(length):
        out[:, t] = bias
        for i in range(taps):
            source = t - taps + 1 + i
            if source >= 0:
                out[:, t] += stream[:, source] @ weights[i]
    return out


@pytest.mark.parametrize("taps,groups", [(1, 1), (3, 2), (4, 4)])
def test_convolution_equals_the_direct_form_across_segments(taps, groups):
    rng = np.random.default_rng(taps)
    width = 8
    stream = rng.normal(size=(2, 19, width)).astype("float32")
    kernel = rng.normal(size=(taps, groups, width // groups, width // groups)).astype("float32")
    bias = rng.normal(size=(width,)).astype("float32")
    want = convolution_reference(stream, kernel, bias)
    tail = np.zeros((2, taps - 1, width), "float32")
    outputs = []
    for start, stop in ((0, 1), (1, 7), (7, 8), (8, 19)):  # one-token segments too
        y, tail = causal_convolution(stream[:, start:stop], tail, kernel, bias)
        outputs.append(to_np(y))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_np(tail), stream[:, 19 - (taps - 1) :], rtol=0, atol=0)


def make_layer(conv_form: str = "partf", **options) -> FastformerAttention:
    layer = create_attention(
        "fastformer",
        8,
        2,
        chunk_size=4,
        convolve=True,
        groups=2,
        kernel_size=3,
        conv_form=conv_form,
        **options,
    )
    layer.build((None, None, 8))
    rng = np.random.default_rng(4)
    if conv_form == "partf":
        layer.conv_bias.assign(rng.normal(size=(8,)).astype("float32"))
    else:  # a layer norm far from the identity
        layer.conv_norm.gamma.assign(rng.normal(size=(8,)).astype("float32") + 1.0)
        layer.conv_norm.beta.assign(rng.normal(size=(8,)).astype("float32"))
    return layer


def attention_alone(layer: FastformerAttention) -> FastformerAttention:
    """The same layer's additive attention without the convolution (its weights)."""
    plain = FastformerAttention(8, 2, chunk_size=4)
    plain.build((None, None, 8))
    conv_weights = {id(w) for w in layer.weights if "conv" in w.path}
    plain.set_weights([w.numpy() for w in layer.weights if id(w) not in conv_weights])
    return plain


def test_seed_form_matches_the_reference():
    """The seed's form: y = c + additive attention(x + c), c = conv(layer norm(x)) with no
    bias and no activation, the float64 reference's convolution."""
    layer = make_layer("seed")
    assert not hasattr(layer, "conv_bias")
    x, mask = random_tokens(2, 13, 8, seed=6)
    params = {
        "conv_kernel": layer.conv_kernel,
        "norm_gamma": layer.conv_norm.gamma,
        "norm_beta": layer.conv_norm.beta,
    }
    local = references.fastformer_seed_convolution(
        {name: to_np(value) for name, value in params.items()}, x, mask, groups=2
    )
    attended, _ = attention_alone(layer)(ops.convert_to_tensor(x + local, "float32"), mask=mask)
    y, _ = layer(x, mask=mask)
    np.testing.assert_allclose(to_np(y), local + to_np(attended), rtol=1e-4, atol=1e-4)


def test_layer_adds_the_convolution_and_attends_over_the_convolved_stream():
    """partf's form: y = gelu(conv(x)) + additive attention(x + gelu(conv(x))), pads
    zeroed first."""
    layer = make_layer()
    plain = attention_alone(layer)
    x, mask = random_tokens(2, 13, 8, seed=6)
    conv = convolution_reference(
        x * mask[..., None], to_np(layer.conv_kernel), to_np(layer.conv_bias)
    )
    local = 0.5 * conv * (1.0 + np.vectorize(math.erf)(conv / math.sqrt(2.0)))  # exact gelu
    attended, _ = plain(ops.convert_to_tensor((x + local).astype("float32")), mask=mask)
    y, _ = layer(x, mask=mask)
    np.testing.assert_allclose(to_np(y), local + to_np(attended), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("conv_form", ["seed", "partf"])
def test_segments_equal_one_call_and_the_layer_stays_causal(conv_form):
    layer = make_layer(conv_form)
    x, mask = random_tokens(2, 37, 8, seed=7)
    assert_segments_equal_one_call(layer, x, mask)
    assert_causal(layer, x, mask, 17)
    assert layer.state_spec(2)["conv_tail"] == ((2, 2, 8), "float32")


def test_config_round_trip_and_default_variables():
    layer = make_layer(use_bias=True)
    clone = assert_config_round_trip(layer)
    assert (clone.convolve, clone.groups, clone.kernel_size) == (True, 2, 3)
    assert clone.conv_form == "partf"
    assert FastformerAttention(8, 2, convolve=True).conv_form == "seed"
    with pytest.raises(ValueError, match="unknown conv_form 'gelu'"):
        FastformerAttention(8, 2, convolve=True, conv_form="gelu")
    default = FastformerAttention(8, 2)
    default.build((None, None, 8))
    assert not any("conv" in w.path for w in default.weights)
    assert "conv_tail" not in default.state_spec(1)


def test_bad_groups_are_refused():
    with pytest.raises(ValueError, match="must be positive and divide d_model"):
        FastformerAttention(8, 2, convolve=True, groups=3)
