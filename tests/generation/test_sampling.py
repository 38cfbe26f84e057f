"""Sampling: the filters (temperature, top-k, top-p) against a numpy reference, the
draws against the filtered distribution, and refused settings."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from partf.generation import Sampling, filter_log_probs, sample_tokens
from tests.generation.helpers import VOCAB


def numpy_filter(log_probs: np.ndarray, temperature: float, top_k: int, top_p: float):
    """Reference: temperature, then top-k, then top-p on the renormalised top-k."""
    out = []
    for row in np.asarray(log_probs, np.float64):
        logits = row / temperature
        order = np.argsort(-logits)
        keep = np.zeros(logits.shape, bool)
        keep[order[: top_k or len(logits)]] = True
        probs = np.where(keep, np.exp(logits - logits.max()), 0.0)
        probs /= probs.sum()
        cumulative = 0.0
        nucleus = np.zeros(logits.shape, bool)
        for index in order:
            if not keep[index] or cumulative >= top_p:
                break
            nucleus[index] = True
            cumulative += probs[index]
        final = np.where(nucleus, np.exp(logits - logits.max()), 0.0)
        out.append(final / final.sum())
    return np.stack(out)


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.0, 0, 0.6), (1.5, 12, 0.8), (1.0, 3, 0.99), (0.5, 0, 0.05)],
)
def test_filter_matches_numpy_reference(temperature, top_k, top_p):
    logits = np.random.default_rng(top_k).normal(size=(6, VOCAB)).astype("float32") * 2.0
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = numpy_filter(log_probs, temperature, top_k, top_p)
    got = np.exp(
        ops.convert_to_numpy(filter_log_probs(log_probs, Sampling(temperature, top_k, top_p)))
    )
    np.testing.assert_allclose(got, expected, atol=1e-5)
    allowed = expected > 0
    if top_k:
        assert (allowed.sum(-1) <= top_k).all()


def test_samples_follow_filtered_distribution():
    probs = np.array([0.3, 0.25, 0.2, 0.1, 0.08, 0.04, 0.02, 0.01], "float32")
    sampling = Sampling(temperature=1.0, top_k=5, top_p=0.8)
    expected = numpy_filter(np.log(probs)[None], 1.0, 5, 0.8)[0]  # tokens 0..3
    rows = np.tile(np.log(probs), (4000, 1))
    draws = ops.convert_to_numpy(sample_tokens(rows, sampling, keras.random.SeedGenerator(7)))
    assert set(np.unique(draws)) <= set(np.flatnonzero(expected > 0))
    frequencies = np.bincount(draws, minlength=len(probs)) / len(draws)
    np.testing.assert_allclose(frequencies, expected, atol=0.03)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(top_k=-1), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
    ],
)
def test_bad_sampling_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Sampling(**kwargs)
