"""The exported graph's sampling, its settings tensors, filters as partf's `Sampling`."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.export.sampling import draw_tokens, filtered_log_probs
from partf.generation import Sampling, filter_log_probs


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.9, 8, 0.6)]
)
def test_filter_equals_partfs(temperature, top_k, top_p):
    log_probs = np.random.default_rng(0).normal(size=(3, 30)).astype(np.float32)
    expected = ops.convert_to_numpy(
        filter_log_probs(log_probs, Sampling(temperature, top_k, top_p))
    )
    got = filtered_log_probs(
        tf.constant(log_probs), tf.constant(temperature), tf.constant(top_k), tf.constant(top_p)
    ).numpy()
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=0, atol=1e-5)


def test_draws_are_greedy_at_zero_seeded_and_never_padding():
    log_probs = np.random.default_rng(1).normal(size=(4, 30)).astype(np.float32)
    log_probs[:, 0] = 10.0  # the padding id, most likely: never drawn

    def draw(temperature, seed):
        args = (tf.constant(temperature), tf.constant(0), tf.constant(1.0))
        return draw_tokens(tf.constant(log_probs), *args, tf.constant([seed, 0])).numpy()

    np.testing.assert_array_equal(draw(0.0, 0), np.argmax(log_probs[:, 1:], axis=-1) + 1)
    np.testing.assert_array_equal(draw(1.0, 3), draw(1.0, 3))
    samples = np.stack([draw(1.0, seed) for seed in range(20)])
    assert (samples != 0).all() and len(np.unique(samples)) > 1
