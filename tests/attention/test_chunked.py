"""The chunk-wise causal linear attention kernel against an independent token-by-token
recurrence."""

import numpy as np
import pytest
from keras import ops

from partf.attention.chunked import causal_linear_attention, linear_state_spec
from tests.attention import references
from tests.attention.helpers import assert_matches_reference, to_np
from tests.layer_checks import float32_atol

# (batch, length, heads, features, value width, chunk size)
SHAPES = [(1, 7, 1, 3, 2, 4), (2, 37, 3, 5, 4, 8), (2, 16, 2, 4, 3, 16)]
# (normalize, log-scaled)
KINDS = [(True, False), (False, False), (True, True)]


def make_inputs(batch, length, heads, feat, dim, log_scaled, seed=0, state=True):
    rng = np.random.default_rng(seed)
    f = np.abs(rng.normal(size=(batch, length, heads, feat))).astype("float32")
    g = np.abs(rng.normal(size=(batch, length, heads, feat))).astype("float32")
    v = rng.normal(size=(batch, length, heads, dim)).astype("float32")
    a = (rng.normal(size=(batch, length, heads)) * 4).astype("float32") if log_scaled else None
    mask = rng.random((batch, length)) > 0.2
    spec = linear_state_spec(batch, heads, feat, dim, normalize=True, log_scale=log_scaled)
    st = {name: np.zeros(shape, "float32") for name, (shape, _) in spec.items()}
    if state:  # a non-empty incoming state
        st["s"] = rng.normal(size=st["s"].shape).astype("float32")
        st["z"] = np.abs(rng.normal(size=st["z"].shape)).astype("float32")
        if log_scaled:
            st["m"] = rng.normal(size=st["m"].shape).astype("float32")
    return f, g, v, a, mask, st


def run(fn, f, g, v, a, mask, state, normalize, **kwargs):
    if not normalize:
        state = {"s": state["s"]}
    return fn(f, g, v, state, k_log_scale=a, mask=mask, normalize=normalize, **kwargs)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("normalize,log_scaled", KINDS)
def test_matches_reference_outputs_state_and_gradients(shape, normalize, log_scaled):
    """The chunked kernel against the token-by-token recurrence (an independent float64
    reference): outputs, the whole state (s, z and m) and the gradients, including
    those with respect to the log-scales."""
    batch, length, heads, feat, dim, chunk = shape
    f, g, v, a, mask, state = make_inputs(batch, length, heads, feat, dim, log_scaled)
    if not normalize:
        state = {"s": state["s"]}
    tensors = dict(f=f, g=g, v=v) | ({"a": a} if log_scaled else {})

    def run_layer(f, g, v, a=None):
        return causal_linear_attention(
            f, g, v, state, k_log_scale=a, mask=mask, normalize=normalize, chunk_size=chunk
        )

    def run_reference(f, g, v, a=None):
        return references.linear_kernel(f, g, v, state, mask, normalize=normalize, log_scale=a)

    assert_matches_reference(run_layer, run_reference, tensors)


@pytest.mark.parametrize("normalize,log_scaled", KINDS)
def test_segments_equal_one_call(normalize, log_scaled):
    f, g, v, a, mask, state = make_inputs(2, 37, 2, 4, 3, log_scaled, seed=1)
    whole, whole_state = run(causal_linear_attention, f, g, v, a, mask, state, normalize)
    outs = []
    for start, stop in [(0, 9), (9, 20), (20, 21), (21, 37)]:
        part = slice(start, stop)
        out, state = run(
            causal_linear_attention,
            f[:, part],
            g[:, part],
            v[:, part],
            None if a is None else a[:, part],
            mask[:, part],
            state,
            normalize,
            chunk_size=4,
        )
        outs.append(to_np(out))
    np.testing.assert_allclose(np.concatenate(outs, 1), to_np(whole), rtol=1e-4, atol=1e-5)
    for name in whole_state:
        np.testing.assert_allclose(
            to_np(state[name]), to_np(whole_state[name]), rtol=1e-4, atol=1e-5
        )


def test_chunk_size_does_not_change_the_result():
    f, g, v, a, mask, state = make_inputs(2, 29, 2, 4, 3, True, seed=2)
    outs = [
        to_np(run(causal_linear_attention, f, g, v, a, mask, state, True, chunk_size=c)[0])
        for c in (1, 5, 64)
    ]
    # The chunks sum the same 29 positions' 4 features in another order; each output is
    # a weighted average of values (and the state's), so of their size.
    atol = float32_atol(29 * 4, max(np.abs(v).max(), np.abs(outs[0]).max()))
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=atol)
    np.testing.assert_allclose(outs[0], outs[2], rtol=0, atol=atol)


def test_huge_log_scales_stay_finite_and_causal():
    """exp(a) would overflow float32 many times over; later keys must not leak back."""
    f, g, v, a, mask, state = make_inputs(1, 20, 1, 3, 2, True, seed=3, state=False)
    a = a * 1e4
    out, new = causal_linear_attention(f, g, v, state, k_log_scale=a, mask=mask, chunk_size=8)
    assert np.isfinite(to_np(out)).all() and all(np.isfinite(to_np(x)).all() for x in new.values())
    later = a.copy()
    later[:, 10:] = 1e6  # a dominant key later in the same chunk and after
    out_later, _ = causal_linear_attention(
        f, g, v, state, k_log_scale=later, mask=mask, chunk_size=8
    )
    np.testing.assert_array_equal(to_np(out_later)[:, :10], to_np(out)[:, :10])


def test_empty_prefix_gives_zeros_not_nan():
    f, g, v, a, mask, state = make_inputs(1, 6, 1, 2, 2, True, state=False)
    mask[:] = [[False, False, True, True, False, True]]
    out, new = causal_linear_attention(f, g, v, state, k_log_scale=a, mask=mask, chunk_size=4)
    out = to_np(out)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[:, :2], 0.0)
    # Only unmasked keys are counted.
    np.testing.assert_allclose(
        to_np(ops.sum(new["z"] * ops.exp(new["m"])[..., None])),
        sum((g[0, t, 0] * np.exp(a[0, t, 0])).sum() for t in (2, 3, 5)),
        rtol=1e-5,
    )


def test_rejects_bad_chunk_size():
    f, g, v, a, mask, state = make_inputs(1, 4, 1, 2, 2, False)
    with pytest.raises(ValueError, match="chunk_size must be positive"):
        causal_linear_attention(f, g, v, state, chunk_size=0)
