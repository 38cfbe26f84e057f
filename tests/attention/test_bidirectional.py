"""`noncausal_linear_attention`, the kernel of every linear mechanism's non-causal form,
against the quadratic sum it stands for, written out in float64:

    out_i = sum_j (f_i . g_j exp(a_j)) v_j / sum_j (f_i . g_j exp(a_j))  over real keys j.
"""

from __future__ import annotations

import numpy as np

from partf.attention.bidirectional import noncausal_linear_attention
from tests.attention.helpers import to_np

B, T, H, F, DV = 2, 7, 2, 3, 4


def features(seed: int) -> tuple[np.ndarray, ...]:
    """Positive query and key features, values and log-scales (float32)."""
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.1, 1.0, size=(B, T, H, F)).astype("float32")
    g = rng.uniform(0.1, 1.0, size=(B, T, H, F)).astype("float32")
    v = rng.normal(size=(B, T, H, DV)).astype("float32")
    a = rng.normal(size=(B, T, H)).astype("float32")
    return f, g, v, a


def quadratic(f, g, v, a=None, mask=None, normalize=True) -> np.ndarray:
    """The same output as a [B, H, T, T] weight matrix, in float64."""
    mask = np.ones((B, T), bool) if mask is None else mask
    real = mask[..., None, None]  # only the real keys are summed: pads are never read
    f = np.asarray(f, "float64")
    g, v = (np.where(real, np.asarray(x, "float64"), 0.0) for x in (g, v))
    scale = (
        np.ones((B, T, H))
        if a is None
        else np.exp(np.where(mask[..., None], np.asarray(a, "float64"), 0.0))
    )
    weights = np.einsum("bihf,bjhf->bhij", f, g) * np.transpose(scale, (0, 2, 1))[:, :, None, :]
    out = np.einsum("bhij,bjhd->bihd", weights, v)
    if not normalize:
        return out
    total = np.transpose(weights.sum(-1), (0, 2, 1))[..., None]  # [B, T, H, 1]
    return np.where(total > 0, out / np.where(total > 0, total, 1.0), 0.0)


def test_equals_the_quadratic_weighted_average_with_log_scales():
    """Log-scales near 100 (exp overflows float32): the kernel's shift by the largest
    real one keeps it finite and the average the same."""
    f, g, v, a = features(0)
    a = a + 100.0
    got = to_np(noncausal_linear_attention(f, g, v, k_log_scale=a))
    np.testing.assert_allclose(got, quadratic(f, g, v, a), rtol=1e-5, atol=1e-6)


def test_pads_count_for_nothing_whatever_they_hold():
    """Pad keys holding inf and NaN leave every output (a pad query's too) as the sum over
    the real keys alone; a sequence with no real key gets zeros."""
    f, g, v, a = features(1)
    mask = np.ones((B, T), bool)
    mask[0, [1, 4]] = False
    mask[1, :] = False
    g[~mask], v[~mask], a[~mask] = np.inf, np.nan, np.inf
    got = to_np(noncausal_linear_attention(f, g, v, k_log_scale=a, mask=mask))
    np.testing.assert_allclose(got, quadratic(f, g, v, a, mask), rtol=1e-5, atol=1e-6)
    assert np.all(got[1] == 0.0)


def test_unnormalised_is_the_raw_sum():
    f, g, v, _ = features(2)
    mask = np.ones((B, T), bool)
    mask[1, 5:] = False
    got = to_np(noncausal_linear_attention(f, g, v, mask=mask, normalize=False))
    want = quadratic(f, g, v, mask=mask, normalize=False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(got, quadratic(f, g, v, mask=mask))
