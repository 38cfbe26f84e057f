"""Checks shared by the attention mechanism tests.

Each mechanism's own test compares it with its reference; the checks here are
the ones every stateful causal mechanism must pass the same way: segments with
carried state equal one call, later tokens never change earlier outputs, no
NaN or Inf in float32 or bfloat16 on large inputs, and a config round trip.
"""

from __future__ import annotations

import math
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


def padding_mask() -> np.ndarray:
    """bool [2, 11]: pads inside the first sequence, at the end of the second (the
    non-causal tests' batch of 2 sequences of 11 tokens)."""
    mask = np.ones((2, 11), bool)
    mask[0, [2, 3, 7]] = False
    mask[1, 8:] = False
    return mask


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


def _discrete(name: str, value: Any) -> bool:
    """State entries that are counts or flags: compared, never differentiated."""
    dtype = np.asarray(value).dtype if not hasattr(value, "dtype") else value.dtype
    return any(word in name for word in ("valid", "mask", "offset")) or "int" in str(dtype)


def differentiable_readout(
    outputs: Any, state: dict[str, Any], as_float64: Callable[[Any], Any], exp, no_gradient=()
) -> dict[str, Any]:
    """The outputs and the state entries a gradient should flow through, by name.

    Sums kept relative to a log-scale m (`s`, `z` beside `m`, any prefix) are read as
    s * exp(m) and z * exp(m): those are what the state means, and they do not depend
    on the reference point m the layer happened to pick (which carries no gradient).
    Flags, counts and the entries in `no_gradient` (e.g. a memory held under
    stop_gradient) are left out. Everything is cast with `as_float64`; `exp` is that
    framework's exponential.
    """
    flat = dict(outputs) if isinstance(outputs, dict) else {"out": outputs}
    flat = {name: as_float64(value) for name, value in flat.items()}
    for name, value in state.items():
        if (
            name in no_gradient
            or _discrete(name, value)
            or name.endswith("m")
            and (name[:-1] + "s" in state)
        ):
            continue
        value = as_float64(value)
        prefix, last = name[:-1], name[-1:]
        if last in "sz" and prefix + "m" in state:
            scale = exp(as_float64(state[prefix + "m"]))
            value = value * (scale[..., None, None] if last == "s" else scale[..., None])
        flat[f"state/{name}"] = value
    return flat


def assert_matches_reference(
    run_layer: Callable[..., tuple[Any, dict[str, Any]]],
    run_reference: Callable[..., tuple[Any, dict[str, Any]]],
    tensors: dict[str, np.ndarray],
    variables: dict[str, Any] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    grad_rtol: float = 1e-3,
    grad_atol: float = 1e-4,
    no_gradient: Sequence[str] = (),
    directions: int = 4,
    seed: int = 7,
) -> None:
    """A layer and its float64 numpy reference agree on the output, on every entry of
    the carried state, and on the gradients.

    Args:
        run_layer: `run_layer(**tensors) -> (outputs, state)` with TensorFlow inputs,
            reading the layer's own variables.
        run_reference: `run_reference(**tensors, **weights) -> (outputs, state)` with
            float64 numpy inputs; `weights` are `variables` as arrays.
        tensors: the inputs both take (q, k, v or x), float32 arrays.
        variables: the layer's trainable weights the reference reads, by the name the
            reference takes them under; gradients are checked for them too.
        no_gradient: state entries the layer carries without gradient.
        directions: random directions per input for the finite differences of inputs
            with more than 64 entries (smaller ones are checked entry by entry).

    The reference must return every state entry the layer returns, and nothing else.
    Gradients: those of a random linear read-out of the outputs and of the state
    (`differentiable_readout`), by TensorFlow for the layer and by central finite
    differences in float64 for the reference.
    """
    variables = dict(variables or {})
    weights = {name: to_np(var) for name, var in variables.items()}
    inputs = {name: np.asarray(value, "float64") for name, value in tensors.items()}

    outputs, state = run_layer(**{k: tf.constant(v, tf.float32) for k, v in tensors.items()})
    ref_outputs, ref_state = run_reference(**inputs, **weights)
    missing = sorted(set(state) - set(ref_state))
    extra = sorted(set(ref_state) - set(state))
    assert not missing and not extra, (
        f"the reference must return every state entry: missing {missing}, extra {extra}"
    )
    flat = outputs if isinstance(outputs, dict) else {"out": outputs}
    ref_flat = ref_outputs if isinstance(ref_outputs, dict) else {"out": ref_outputs}
    assert set(flat) == set(ref_flat)
    for name in flat:
        np.testing.assert_allclose(
            to_np(flat[name]), ref_flat[name], rtol=rtol, atol=atol, err_msg=name
        )
    for name, value in state.items():
        np.testing.assert_allclose(
            to_np(value),
            np.asarray(ref_state[name], "float64"),
            rtol=rtol,
            atol=atol,
            err_msg=f"state {name}",
        )

    # One fixed random read-out of everything that carries a gradient.
    as_array = lambda x: np.asarray(x, "float64")
    template = differentiable_readout(ref_outputs, ref_state, as_array, np.exp, no_gradient)
    rng = np.random.default_rng(seed)
    probes = {name: rng.normal(size=np.shape(value)) for name, value in template.items()}

    def ref_loss(**changed: np.ndarray) -> float:
        args = {**inputs, **weights, **changed}
        read = differentiable_readout(*run_reference(**args), as_array, np.exp, no_gradient)
        return float(sum(np.sum(read[name] * probes[name]) for name in probes))

    watched = {k: tf.Variable(v, dtype=tf.float32) for k, v in tensors.items()}
    with tf.GradientTape() as tape:
        as_tensor = lambda x: tf.cast(tf.convert_to_tensor(x), tf.float64)
        read = differentiable_readout(*run_layer(**watched), as_tensor, tf.exp, no_gradient)
        loss = sum(tf.reduce_sum(read[name] * probes[name]) for name in probes)
    sources = {**watched, **variables}
    grads = dict(zip(sources, tape.gradient(loss, list(sources.values())), strict=True))

    for name, value in {**inputs, **weights}.items():
        got = np.zeros(value.shape) if grads[name] is None else to_np(grads[name])
        size = value.size
        if size <= 64:
            basis = np.eye(size).reshape((size, *value.shape))
        else:
            basis = rng.normal(size=(directions, *value.shape))
            basis /= np.sqrt(np.sum(basis**2, axis=tuple(range(1, basis.ndim)), keepdims=True))
        step = 1e-5
        for direction in basis:
            numeric = (
                ref_loss(**{name: value + step * direction})
                - ref_loss(**{name: value - step * direction})
            ) / (2 * step)
            analytic = float(np.sum(got * direction))
            scale = abs(numeric) + np.linalg.norm(got) / math.sqrt(size)
            assert abs(analytic - numeric) <= grad_atol + grad_rtol * scale, (
                f"d loss / d {name} along a direction: layer {analytic}, reference {numeric}"
            )


def numpy_state(state: dict[str, Any]) -> dict[str, np.ndarray]:
    """A state as numpy arrays of its own dtypes (int32 offsets stay int32)."""
    return {name: np.asarray(ops.convert_to_numpy(value)) for name, value in state.items()}


def check_attend(
    layer: keras.layers.Layer,
    reference: Callable[..., Any],
    config: dict[str, Any],
    q: Any,
    k: Any,
    v: Any,
    state: dict[str, Any],
    mask: Any,
    variables: dict[str, Any] | None = None,
    constants: dict[str, Any] | None = None,
    training: bool = False,
    extra: dict[str, Any] | None = None,
    **tolerances: Any,
) -> None:
    """`layer.attend` against `reference(config, params, q, k, v, state, mask, **extra)`
    from tests/attention/references.py, with `assert_matches_reference`.

    `params` holds `variables` (trainable weights, gradients checked) and `constants`
    (arrays the reference reads but nothing trains, e.g. Performer's random features)
    as numpy arrays.
    """
    state = numpy_state(state)
    fixed = {name: to_np(value) for name, value in (constants or {}).items()}

    def run_layer(q, k, v):
        return layer.attend(q, k, v, state, mask=mask, training=training)

    def run_reference(q, k, v, **weights):
        return reference(config, {**fixed, **weights}, q, k, v, state, mask, **(extra or {}))

    assert_matches_reference(run_layer, run_reference, dict(q=q, k=k, v=v), variables, **tolerances)


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

    On the output, on every state entry (the reference must return each entry the
    layer returns), and on the gradients of both with respect to q, k and v.
    """
    out, new = layer.attend(q, k, v, state, mask=mask)
    ref, ref_new = reference(q, k, v, state, mask)
    assert set(ref_new) == set(new), (
        f"the reference must return every state entry: it returns {sorted(ref_new)}, "
        f"the layer {sorted(new)}"
    )
    np.testing.assert_allclose(to_np(out), to_np(ref), rtol=rtol, atol=atol)
    for name, value in ref_new.items():
        np.testing.assert_allclose(
            to_np(new[name]), to_np(value), rtol=rtol, atol=atol, err_msg=name
        )

    def fast_path(q, k, v):
        return layer.attend(q, k, v, state, mask=mask)

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


class FixedNoise:
    """Stands in for `keras.random.normal`: the same N(0, 1) draw for a given shape
    every time (so a layer called twice, for values and for gradients, sees the same
    proposals), each call's draw kept in `calls`."""

    def __init__(self, seed: int = 11) -> None:
        self.rng = np.random.default_rng(seed)
        self.by_shape: dict[tuple[int, ...], np.ndarray] = {}
        self.calls: list[np.ndarray] = []

    def __call__(self, shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
        shape = tuple(int(n) for n in shape)
        if shape not in self.by_shape:
            self.by_shape[shape] = self.rng.normal(size=shape).astype("float32")
        self.calls.append(self.by_shape[shape])
        return ops.convert_to_tensor(self.by_shape[shape] * stddev + mean)
