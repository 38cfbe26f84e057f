"""Checks shared by the attention mechanism tests.

Each mechanism's own test compares it with its reference; the checks here are
the ones every stateful causal mechanism must pass the same way: segments with
carried state equal one call, later tokens never change earlier outputs, no
NaN or Inf in float32 or bfloat16 on large inputs, and a config round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from partf.attention import create_attention

# Cut points of a length-37 stream into 4 segments of uneven lengths,
# including a one-token segment.
CUTS_37 = (0, 9, 20, 21, 37)


def to_np(x: Any) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(x), dtype="float64")


def random_tokens(batch: int, length: int, width: int, seed: int = 0, scale: float = 1.0):
    """x [B, T, width] float32 and a padding mask [B, T] with ~15% padding."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(batch, length, width)) * scale).astype("float32")
    mask = rng.random((batch, length)) > 0.15
    return x, mask


def random_heads(batch: int, length: int, heads: int, dim: int, seed: int = 0, scale: float = 1.0):
    """q, k, v [B, T, H, Dh] float32."""
    rng = np.random.default_rng(seed)
    return tuple(
        (rng.normal(size=(batch, length, heads, dim)) * scale).astype("float32") for _ in range(3)
    )


def gradients(fn: Callable[..., Any], inputs: Sequence[Any], seed: int = 7) -> list[np.ndarray]:
    """Gradients of a random linear read-out of everything `fn(*inputs)` returns.

    `fn` returns a tensor or a (nested) structure of tensors; each gets its
    own random weights, so the outputs and the state both shape the gradients.
    """
    rng = np.random.default_rng(seed)
    variables = [tf.Variable(np.asarray(x, dtype="float32")) for x in inputs]
    with tf.GradientTape() as tape:
        flat = [tf.convert_to_tensor(out) for out in tf.nest.flatten(fn(*variables))]
        outputs = [tf.cast(out, tf.float64) for out in flat if out.dtype.is_floating]
        loss = sum(
            tf.reduce_sum(out * rng.normal(size=out.shape).astype("float64")) for out in outputs
        )
    return [to_np(g) for g in tape.gradient(loss, variables)]


def run_segments(
    layer: keras.layers.Layer,
    x: Any,
    mask: Any,
    cuts: Sequence[int] = CUTS_37,
    training: bool = False,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Runs the stream segment by segment, carrying the state."""
    state, outputs = None, []
    for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
        y, state = layer(x[:, start:stop], state=state, mask=mask[:, start:stop], training=training)
        outputs.append(to_np(y))
    return np.concatenate(outputs, axis=1), {k: to_np(v) for k, v in state.items()}


def assert_segments_equal_one_call(
    layer: keras.layers.Layer, x: Any, mask: Any, cuts: Sequence[int] = CUTS_37, atol=2e-5
) -> None:
    """4 segments with carried state == one call, on outputs and final state."""
    y, state = layer(x, mask=mask)
    y_seg, state_seg = run_segments(layer, x, mask, cuts)
    np.testing.assert_allclose(y_seg, to_np(y), rtol=1e-4, atol=atol)
    assert set(state_seg) == set(state)
    for name, value in state.items():
        np.testing.assert_allclose(
            state_seg[name], to_np(value), rtol=1e-4, atol=atol, err_msg=name
        )


def assert_causal(layer: keras.layers.Layer, x: Any, mask: Any, position: int) -> None:
    """Changing tokens from `position` on leaves every earlier output unchanged."""
    changed = np.array(x)
    changed[:, position:] = np.random.default_rng(99).normal(size=changed[:, position:].shape) * 3
    y, _ = layer(x, mask=mask)
    y_changed, _ = layer(changed, mask=mask)
    np.testing.assert_allclose(
        to_np(y_changed)[:, :position], to_np(y)[:, :position], rtol=1e-5, atol=1e-6
    )
    assert not np.allclose(to_np(y_changed)[:, position:], to_np(y)[:, position:])


def assert_finite_on_large_inputs(name: str, options: dict[str, Any], width: int = 16) -> None:
    """No NaN or Inf in outputs or state, float32 and mixed bfloat16, inputs of size ~1e3."""
    x, mask = random_tokens(2, 23, width, seed=3, scale=1e3)
    mask[0, :5] = False  # a stream that starts with padding
    for dtype in ("float32", "mixed_bfloat16"):
        layer = create_attention(name, width, 2, causal=name != "lara", dtype=dtype, **options)
        state = None
        for segment in (slice(0, 11), slice(11, 23)):
            y, state = layer(x[:, segment], state=state, mask=mask[:, segment], training=True)
            assert np.isfinite(to_np(y)).all(), (name, dtype)
            for key, value in state.items():
                assert np.isfinite(to_np(value)).all(), (name, dtype, key)
                if key != "offset":
                    assert value.dtype == "float32", (name, dtype, key)
        expected = "bfloat16" if dtype == "mixed_bfloat16" else "float32"
        assert y.dtype == expected


def explicit_softmax(logits: Any, visible: Any) -> Any:
    """Softmax over the last axis counting only `visible` entries, written out."""
    logits = ops.where(visible, logits, -1e9)
    top = ops.max(logits, axis=-1, keepdims=True)
    weights = ops.exp(logits - top) * ops.cast(visible, logits.dtype)
    return weights / ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1e-30)


def assert_attend_matches(
    layer: keras.layers.Layer,
    reference: Callable[..., Any],
    q: Any,
    k: Any,
    v: Any,
    state: dict[str, Any],
    mask: Any,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    grad_rtol: float = 1e-3,
    grad_atol: float = 1e-4,
) -> None:
    """layer.attend and `reference(q, k, v, state, mask) -> (out, state)` agree.

    On the output, on every state entry the reference returns, and on the
    gradients of both with respect to q, k and v.
    """
    out, new = layer.attend(q, k, v, state, mask=mask)
    ref, ref_new = reference(q, k, v, state, mask)
    np.testing.assert_allclose(to_np(out), to_np(ref), rtol=rtol, atol=atol)
    for name, value in ref_new.items():
        np.testing.assert_allclose(
            to_np(new[name]), to_np(value), rtol=rtol, atol=atol, err_msg=name
        )

    def fast_path(q, k, v):  # the output and the state entries the reference checks
        out, new = layer.attend(q, k, v, state, mask=mask)
        return out, {name: new[name] for name in ref_new}

    fast = gradients(fast_path, [q, k, v])
    slow = gradients(lambda q, k, v: reference(q, k, v, state, mask), [q, k, v])
    for name, got, want in zip("qkv", fast, slow, strict=True):
        np.testing.assert_allclose(got, want, rtol=grad_rtol, atol=grad_atol, err_msg=f"d/d{name}")


def random_state(layer: keras.layers.Layer, batch: int, seed: int = 5) -> dict[str, np.ndarray]:
    """A non-empty random state of the layer's spec (valid flags 0/1, offsets in range)."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, (shape, dtype) in layer.state_spec(batch).items():
        if dtype == "int32":
            state[name] = rng.integers(0, getattr(layer, "window_size", 1), size=shape).astype(
                dtype
            )
        elif "valid" in name:
            state[name] = (rng.random(shape) > 0.3).astype(dtype)
        else:
            state[name] = rng.normal(size=shape).astype(dtype)
    return state
