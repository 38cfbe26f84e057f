"""TransNormer's NormAttention and DiagAttention against explicit references."""

import math

import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention, get_attention_class
from partf.attention.transnormer import DiagAttention, NormAttention
from tests.attention.helpers import (
    assert_attend_matches,
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    explicit_softmax,
    random_heads,
    random_state,
    random_tokens,
)
from tests.layer_checks import assert_config_round_trip

PHI = {
    "elu": lambda x: ops.elu(x),
    "elu+1": lambda x: ops.elu(x) + 1.0,
    "relu": lambda x: ops.relu(x),
}


def normalized(layer, out):
    if layer.norm_type == "simple_rms":
        return out / ops.sqrt(ops.mean(out * out, axis=(-2, -1), keepdims=True) + 1e-6)
    if layer.norm_type == "layer":
        return layer.output_norm(out)
    return out


def norm_reference(layer, q, k, v, state, mask):
    """Norm(sum_{j<=i} (phi(q_i).phi(k_j)) v_j + phi(q_i) S): no denominator."""
    phi = PHI[layer.feature_map]
    f, g = phi(ops.cast(q, "float64")), phi(ops.cast(k, "float64"))
    length = q.shape[1]
    g = g * np.asarray(mask, "float64")[:, :, None, None]
    causal = np.tril(np.ones((length, length)))
    weights = ops.einsum("bihf,bjhf->bhij", f, g) * causal
    s0 = ops.cast(state["s"], "float64")
    out = ops.einsum("bhij,bjhd->bihd", weights, ops.cast(v, "float64"))
    out = out + ops.einsum("bihf,bhfd->bihd", f, s0)
    new_s = s0 + ops.einsum("bjhf,bjhd->bhfd", g, ops.cast(v, "float64"))
    return normalized(layer, ops.cast(out, "float32")), {"s": new_s}


@pytest.mark.parametrize(
    "batch,length,heads,dim,chunk,feature_map,norm_type",
    [
        (1, 7, 1, 4, 4, "elu", "simple_rms"),
        (2, 23, 3, 4, 8, "elu+1", "layer"),
        (2, 12, 2, 3, 64, "relu", "none"),
    ],
)
def test_norm_matches_reference(batch, length, heads, dim, chunk, feature_map, norm_type):
    layer = NormAttention(
        heads * dim, heads, chunk_size=chunk, feature_map=feature_map, norm_type=norm_type
    )
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    assert_attend_matches(
        layer, lambda *a: norm_reference(layer, *a), q, k, v, state, mask, rtol=2e-4
    )


def diag_reference(layer, q, k, v, state, mask):
    """Per example: the carried tokens then the segment, at positions 0, 1, ...
    of the open block; query p sees keys j <= p of its own block of W."""
    window = layer.window_size
    outs, buffers = [], {"buf_k": [], "buf_v": [], "buf_valid": []}
    for b in range(q.shape[0]):
        carried = int(state["offset"][b])
        keys = ops.concatenate([state["buf_k"][b, :carried], k[b]], axis=0)  # [P, H, Dh]
        values = ops.concatenate([state["buf_v"][b, :carried], v[b]], axis=0)
        valid = np.concatenate([state["buf_valid"][b, :carried] > 0.5, np.asarray(mask[b])])
        rows = []
        for t in range(q.shape[1]):
            p = carried + t
            start = (p // window) * window
            logits = ops.einsum("hd,jhd->hj", q[b, t], keys[start : p + 1])
            logits = logits / math.sqrt(q.shape[-1])
            visible = valid[None, start : p + 1]
            if layer.diag_activation == "softmax":
                weights = explicit_softmax(logits, visible)
            else:
                weights = ops.relu(logits) * visible
            rows.append(ops.einsum("hj,jhd->hd", weights, values[start : p + 1]))
        outs.append(ops.stack(rows))
        end = carried + q.shape[1]
        start = (end // window) * window
        pad = [[0, window - (end - start)], [0, 0], [0, 0]]
        buffers["buf_k"].append(ops.pad(keys[start:end], pad))
        buffers["buf_v"].append(ops.pad(values[start:end], pad))
        buffers["buf_valid"].append(np.pad(valid[start:end], [0, window - (end - start)]))
    new_state = {name: ops.stack(parts) for name, parts in buffers.items()}
    new_state["buf_valid"] = ops.cast(new_state["buf_valid"], "float32")
    new_state["offset"] = (np.asarray(state["offset"]) + q.shape[1]) % window
    return normalized(layer, ops.stack(outs)), new_state


@pytest.mark.parametrize(
    "batch,length,heads,dim,window,activation",
    [(1, 7, 1, 4, 3, "softmax"), (2, 23, 3, 4, 8, "softmax"), (2, 5, 2, 3, 16, "relu")],
)
def test_diag_matches_reference(batch, length, heads, dim, window, activation):
    layer = DiagAttention(heads * dim, heads, window_size=window, diag_activation=activation)
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    assert_attend_matches(
        layer, lambda *a: diag_reference(layer, *a), q, k, v, state, mask, rtol=2e-4
    )


@pytest.mark.parametrize(
    "name,options", [("norm", {"chunk_size": 4}), ("diag", {"window_size": 5})]
)
def test_segments_equal_one_call(name, options):
    layer = create_attention(name, 12, 3, **options)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


@pytest.mark.parametrize(
    "name,options", [("norm", {"chunk_size": 4}), ("diag", {"window_size": 4})]
)
def test_causal(name, options):
    layer = create_attention(name, 12, 3, **options)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("norm", {"chunk_size": 8})
    assert_finite_on_large_inputs("diag", {"window_size": 4, "diag_activation": "relu"})
    assert_finite_on_large_inputs("diag", {"window_size": 4})


def test_config_round_trip_and_validation():
    assert get_attention_class("norm") is NormAttention
    assert get_attention_class("diag") is DiagAttention
    norm = NormAttention(12, 3, chunk_size=5, feature_map="relu", norm_type="layer")
    clone = assert_config_round_trip(norm)
    assert (clone.chunk_size, clone.feature_map, clone.norm_type) == (5, "relu", "layer")
    diag = DiagAttention(12, 3, window_size=7, diag_activation="relu", norm_type="none")
    clone = assert_config_round_trip(diag)
    assert (clone.window_size, clone.diag_activation, clone.norm_type) == (7, "relu", "none")
    with pytest.raises(ValueError, match="unknown feature_map 'tanh'; choose one of"):
        NormAttention(12, 3, feature_map="tanh")
    with pytest.raises(ValueError, match="unknown diag_activation"):
        DiagAttention(12, 3, diag_activation="gelu")
