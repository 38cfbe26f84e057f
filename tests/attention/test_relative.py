"""Relative attention against an independent four-term reference, causality and memory."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.attention import create_attention, get_attention_class
from partf.attention.relative import RelativeAttention, relative_shift, sinusoidal_encoding
from tests.attention import references
from tests.attention.helpers import (
    CUTS_37,
    assert_matches_reference,
    assert_segments_equal_one_call,
    random_tokens,
    to_np,
)
from tests.layer_checks import assert_close, assert_config_round_trip

D, H = 12, 3


def make_layer(
    mem_len=0, causal=True, clamp_len=None, use_bias=False, seed=0, compat=None, query_chunk=0
):
    options = {} if compat is None else {"compat": compat}
    if query_chunk:
        options["query_chunk"] = query_chunk
    layer = create_attention(
        "relative",
        D,
        H,
        causal=causal,
        mem_len=mem_len,
        clamp_len=clamp_len,
        use_bias=use_bias,
        **options,
    )
    layer.build((None, None, D))
    rng = np.random.default_rng(seed)
    # Random non-zero biases so the (c) and (d) terms matter.
    layer.content_bias.assign(rng.normal(size=(H, D // H)).astype("float32"))
    layer.position_bias.assign(rng.normal(size=(H, D // H)).astype("float32"))
    if layer.use_bias:
        for dense in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense):
            dense.bias.assign(rng.normal(size=dense.bias.shape).astype("float32"))
    return layer


def random_state(batch, mem_len, valid_counts, seed=1):
    rng = np.random.default_rng(seed)
    memory = rng.normal(size=(batch, mem_len, D)).astype("float32")
    mask = np.zeros((batch, mem_len), "int32")
    for b, count in enumerate(valid_counts):
        if count:
            mask[b, -count:] = 1  # memory is right-aligned: the newest slots are valid
    return {"memory": memory, "memory_mask": mask}


def test_registered_and_config_round_trip():
    assert get_attention_class("relative") is RelativeAttention
    layer = RelativeAttention(
        d_model=D,
        num_heads=H,
        head_dim=5,
        dropout_rate=0.25,
        causal=False,
        use_bias=True,
        mem_len=7,
        clamp_len=3,
        attention_dropout_rate=0.3,
        query_chunk=2,
        name="rel",
    )
    clone = assert_config_round_trip(layer)
    assert (clone.mem_len, clone.clamp_len, clone.head_dim, clone.causal) == (7, 3, 5, False)
    assert (clone.attention_dropout_rate, clone.query_chunk) == (0.3, 2)


def test_relative_shift_matches_gather():
    batch, heads, q_len, key_len = 2, 3, 5, 9
    for length in (key_len + 1, key_len + q_len):  # causal and full layouts
        scores = np.random.default_rng(0).normal(size=(batch, heads, q_len, length))
        shifted = np.asarray(relative_shift(ops.convert_to_tensor(scores), key_len))
        mem = key_len - q_len
        for i in range(q_len):
            for j in range(key_len):
                distance = mem + i - j
                if length == key_len + 1 and distance < 0:
                    continue  # causal layout: only the visible entries are defined
                p = key_len - 1 - distance
                np.testing.assert_allclose(shifted[:, :, i, j], scores[:, :, i, p])


def weights_of(layer):
    """Every trainable weight, under the name the reference takes it."""
    found = {
        "query_kernel": layer.query_dense.kernel,
        "key_kernel": layer.key_dense.kernel,
        "value_kernel": layer.value_dense.kernel,
        "output_kernel": layer.output_dense.kernel,
        "position_kernel": layer.position_dense.kernel,
        "content_bias": layer.content_bias,
        "position_bias": layer.position_bias,
    }
    if layer.use_bias:
        for name in ("query", "key", "value", "output"):
            found[f"{name}_bias"] = getattr(layer, f"{name}_dense").bias
    return found


def config_of(layer):
    return {
        "mem_len": layer.mem_len,
        "clamp_len": layer.clamp_len,
        "causal": layer.causal,
        "compat": layer.compat,
    }


@pytest.mark.parametrize(
    "causal, mem_len, clamp_len, use_bias, q_len, query_chunk",
    [
        (True, 0, None, False, 5, 0),
        (True, 4, None, True, 5, 0),
        (True, 6, 3, False, 1, 0),
        (True, 3, None, False, 6, 0),
        (False, 0, None, True, 4, 0),
        (False, 4, 2, False, 3, 0),
        # Queries scored a chunk at a time: chunks that divide the segment, one that
        # leaves a short last chunk, and one without memory.
        (True, 4, None, True, 6, 2),
        (True, 6, 3, False, 7, 3),
        (True, 0, None, False, 5, 2),
    ],
)
def test_matches_four_term_reference(causal, mem_len, clamp_len, use_bias, q_len, query_chunk):
    """Outputs, the new memory and its mask, and the gradients (input and every weight)
    equal the independent pair-by-pair reference's."""
    layer = make_layer(mem_len, causal, clamp_len, use_bias, query_chunk=query_chunk)
    x = np.random.default_rng(3).normal(size=(2, q_len, D)).astype("float32")
    mask = np.ones((2, q_len), bool)
    mask[1, q_len // 2 + 1 :] = False  # a padded tail in the second row
    state = random_state(2, mem_len, [mem_len, mem_len // 2]) if mem_len else {}

    def run_layer(x):
        return layer(x, state=state or None, mask=mask)

    def run_reference(x, **weights):
        return references.relative(config_of(layer), weights, x, state, mask)

    assert_matches_reference(
        run_layer, run_reference, {"x": x}, weights_of(layer), no_gradient=("memory",)
    )


@pytest.mark.parametrize("mem_len, q_len", [(0, 5), (4, 5), (6, 1)])
def test_original_compat_matches_reference(mem_len, q_len):
    """compat="original" (scores / Dh, biases everywhere, ReLU after the output) equals
    the reference computing the original project's formula, values and gradients."""
    layer = make_layer(mem_len, compat="original")
    assert layer.use_bias  # the original's projections all have biases
    x = np.random.default_rng(4).normal(size=(2, q_len, D)).astype("float32")
    mask = np.ones((2, q_len), bool)
    state = random_state(2, mem_len, [mem_len, mem_len // 2]) if mem_len else {}
    y, _ = layer(x, state=state or None, mask=mask)
    # The ReLU is there: some outputs are exactly zero, none negative.
    assert np.asarray(y).min() == 0.0
    assert_matches_reference(
        lambda x: layer(x, state=state or None, mask=mask),
        lambda x, **weights: references.relative(config_of(layer), weights, x, state, mask),
        {"x": x},
        weights_of(layer),
        no_gradient=("memory",),
    )


def test_original_compat_differs_from_transformer_xl_and_round_trips():
    """The two compat modes compute different functions of the same weights, and the
    mode survives get_config; the original's Glorot limits over 2-D kernels are used."""
    layer = make_layer(4, compat="original")
    clone = assert_config_round_trip(layer)
    assert clone.compat == "original"
    config = config_of(layer)
    x = np.random.default_rng(5).normal(size=(2, 5, D)).astype("float32")
    mask = np.ones((2, 5), bool)
    state = random_state(2, 4, [4, 2])
    weights = {k: np.asarray(v) for k, v in weights_of(layer).items()}
    original, _ = references.relative(config, weights, x, state, mask)
    plain, _ = references.relative({**config, "compat": "transformer_xl"}, weights, x, state, mask)
    assert np.abs(original - plain).max() > 1e-2
    # Query kernel [D, H, Dh] drawn within the original's Dense(3 D) limit, not EinsumDense's.
    limit = np.sqrt(6.0 / (D + 3 * D))
    kernel = np.asarray(layer.query_dense.kernel)
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.8 * limit
    with pytest.raises(ValueError, match="unknown compat"):
        RelativeAttention(d_model=D, num_heads=H, compat="bogus")


@pytest.mark.parametrize("mem_len", [0, 4])
def test_causal_later_tokens_do_not_change_earlier_outputs(mem_len):
    layer = make_layer(mem_len)
    state = random_state(2, mem_len, [mem_len, 2]) if mem_len else None
    x = np.random.default_rng(5).normal(size=(2, 6, D)).astype("float32")
    y, _ = layer(x, state=state)
    for t in range(6):
        changed = x.copy()
        changed[:, t:] += 3.0
        y2, _ = layer(changed, state=state)
        assert_close(y2[:, :t], y[:, :t], atol=1e-6)
        assert not np.allclose(np.asarray(y2[:, t:]), np.asarray(y[:, t:]))


def test_new_memory_is_last_inputs_without_gradient():
    layer = make_layer(mem_len=4)
    state = random_state(2, 4, [4, 1])
    x = keras.random.normal((2, 3, D), seed=6)
    mask = np.array([[1, 1, 1], [1, 1, 0]], bool)
    with tf.GradientTape() as tape:
        tape.watch(x)
        _, new_state = layer(x, state=state, mask=mask)
        memory = new_state["memory"]
    expected = np.concatenate([state["memory"], np.asarray(x)], axis=1)[:, -4:]
    assert_close(memory, expected)
    assert new_state["memory"].dtype == "float32"
    np.testing.assert_array_equal(
        np.asarray(new_state["memory_mask"]), [[1, 1, 1, 1], [1, 1, 1, 0]]
    )
    assert tape.gradient(memory, x) is None


def test_empty_memory_equals_no_memory():
    with_memory = make_layer(mem_len=5)
    without = make_layer(mem_len=0)
    for src, dst in zip(with_memory.weights, without.weights, strict=True):
        dst.assign(src)
    x = keras.random.normal((2, 4, D), seed=7)
    # Zero state: every slot invalid, so the (zero) memory is never attended.
    y_mem, _ = with_memory(x)
    y_none, _ = without(x)
    assert_close(y_mem, y_none, atol=1e-6)


@pytest.mark.parametrize("query_chunk", [0, 4])
def test_four_segments_with_memory_equal_one_pass(query_chunk):
    """A memory as long as the stream: four uneven segments (one of a single token,
    pads inside) with carried memory equal one call, on the outputs and the memory."""
    layer = make_layer(mem_len=40, query_chunk=query_chunk)
    x, mask = random_tokens(2, 37, D, seed=8)
    assert_segments_equal_one_call(layer, x, mask, CUTS_37)


@pytest.mark.parametrize("query_chunk", [0, 2])
def test_a_query_that_sees_no_key_outputs_zeros(query_chunk):
    """Every other mechanism (masked_softmax) gives zeros there: the pad's output then
    depends on nothing, in one call or in segments."""
    layer = make_layer(mem_len=4, query_chunk=query_chunk)
    x = np.random.default_rng(10).normal(size=(1, 5, D)).astype("float32")
    mask = np.array([[False, False, True, True, True]])
    y, _ = layer(x, mask=mask)
    weights = {name: to_np(var) for name, var in weights_of(layer).items()}
    state = {name: to_np(value) for name, value in layer.get_initial_state(1).items()}
    want, _ = references.relative(config_of(layer), weights, x, state, mask)
    assert_close(y, want, rtol=1e-4, atol=1e-5)


def test_four_segments_with_a_short_memory_match_the_reference():
    """A memory shorter than the stream: each segment sees the last M inputs before it,
    as the reference computes them segment by segment, memory carried on both sides."""
    layer = make_layer(mem_len=6, clamp_len=5)
    x, mask = random_tokens(2, 37, D, seed=9)
    weights = {name: to_np(var) for name, var in weights_of(layer).items()}
    state = {name: to_np(value) for name, value in layer.get_initial_state(2).items()}
    layer_state = None
    for start, stop in zip(CUTS_37[:-1], CUTS_37[1:], strict=True):
        part = slice(start, stop)
        y, layer_state = layer(x[:, part], state=layer_state, mask=mask[:, part])
        want, state = references.relative(
            config_of(layer), weights, x[:, part], state, mask[:, part]
        )
        assert_close(y, want, rtol=1e-4, atol=1e-5)
        assert set(layer_state) == set(state)
        for name, value in state.items():
            assert_close(layer_state[name], value, rtol=1e-5, atol=1e-6)


def test_sinusoid_layout():
    enc = np.asarray(sinusoidal_encoding(ops.convert_to_tensor([0, 2]), 6))
    freqs = 1.0 / 10000 ** (np.arange(0, 6, 2) / 6)
    np.testing.assert_allclose(
        enc[1], np.concatenate([np.sin(2 * freqs), np.cos(2 * freqs)]), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(enc[0], [0, 0, 0, 1, 1, 1])


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="mem_len must be >= 0"):
        RelativeAttention(D, H, mem_len=-1)
    with pytest.raises(ValueError, match="clamp_len must be positive"):
        RelativeAttention(D, H, clamp_len=0)
    with pytest.raises(ValueError, match="query_chunk must be >= 0"):
        RelativeAttention(D, H, query_chunk=-1)


@pytest.mark.parametrize("rates", [(0.5, 0.0), (0.0, 0.5)])
def test_dropout_only_in_training(rates):
    dropout, dropatt = rates
    layer = create_attention(
        "relative", D, H, dropout_rate=dropout, attention_dropout_rate=dropatt, mem_len=2
    )
    x = keras.random.normal((2, 4, D), seed=9)
    eval_1, _ = layer(x, training=False)
    eval_2, _ = layer(x, training=False)
    train, _ = layer(x, training=True)
    assert_close(eval_1, eval_2)
    assert not np.allclose(np.asarray(train), np.asarray(eval_1))
    with pytest.raises(ValueError, match="attention_dropout_rate must be in"):
        RelativeAttention(D, H, attention_dropout_rate=1.0)


@pytest.mark.parametrize(
    ("causal", "clamp_len", "use_bias"), [(True, None, False), (False, 3, True)]
)
def test_inference_cache_equals_uncached_steps(causal, clamp_len, use_bias):
    # Generation feeds one token at a time; the cached path must give the same
    # outputs and memory as the plain one, also after a longer segment in between.
    mem_len = 6
    layer = make_layer(mem_len=mem_len, causal=causal, clamp_len=clamp_len, use_bias=use_bias)
    x = np.random.default_rng(3).normal(size=(2, 9, D)).astype("float32")
    mask = np.ones((2, 9), bool)
    mask[1, 4] = False  # a padded token must stay invisible in the cache too
    plain = random_state(2, mem_len, [6, 2])
    cached = layer.inference_state(plain)
    assert set(cached) == {"memory", "memory_mask", "keys", "values", "position"}
    segments = [(0, 1), (1, 2), (2, 5), (5, 6), (6, 7), (7, 9)]  # ones and longer ones
    for start, stop in segments:
        y_plain, plain = layer(x[:, start:stop], state=plain, mask=mask[:, start:stop])
        y_cached, cached = layer(x[:, start:stop], state=cached, mask=mask[:, start:stop])
        assert_close(y_cached, y_plain, atol=1e-5)
        for name in ("memory", "memory_mask"):
            assert_close(cached[name], plain[name], atol=1e-6)
        # The cache is the projection of the memory it sits next to.
        assert_close(cached["keys"], layer.key_dense(plain["memory"]), atol=1e-5)
        assert_close(cached["values"], layer.value_dense(plain["memory"]), atol=1e-5)


def test_inference_state_without_memory_is_unchanged():
    assert make_layer(mem_len=0).inference_state({}) == {}
