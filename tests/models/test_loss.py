"""partf.models.loss: the token-weighted mean, the layers' losses and the score-function
term, against numpy."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.models.loss import (
    BASELINE_DECAY,
    add_layer_losses,
    mean_token_loss,
    score_function_term,
    sum_over_replicas,
)


def _numpy(value) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(value))


def test_the_mean_skips_target_zero_and_weighs_rows_and_tokens():
    rng = np.random.default_rng(0)
    nll = rng.random((3, 5)).astype(np.float32)
    targets = rng.integers(0, 4, size=(3, 5)).astype(np.int32)
    scored = (targets != 0).astype(np.float64)
    loss, replicas = mean_token_loss(nll, targets)
    assert replicas == 1.0
    assert float(loss) == pytest.approx((nll * scored).sum() / scored.sum(), rel=1e-6)
    rows = np.array([1.0, 0.0, 2.0], np.float32)  # one weight per row
    loss, _ = mean_token_loss(nll, targets, rows)
    weights = scored * rows[:, None]
    assert float(loss) == pytest.approx((nll * weights).sum() / weights.sum(), rel=1e-6)
    tokens = rng.random((3, 5)).astype(np.float32)  # one weight per token
    loss, _ = mean_token_loss(nll, targets, tokens)
    weights = scored * tokens
    assert float(loss) == pytest.approx((nll * weights).sum() / weights.sum(), rel=1e-6)


def test_nothing_scored_is_a_zero_loss_not_a_nan():
    loss, _ = mean_token_loss(np.ones((2, 3), np.float32), np.zeros((2, 3), np.int32))
    assert float(loss) == 0.0


def test_layer_losses_are_added_in_float32_and_shared_among_replicas():
    assert float(add_layer_losses(1.0, [])) == 1.0
    total = add_layer_losses(ops.ones(()), [ops.ones((), "float16"), 2.0], replicas=4.0)
    assert _numpy(total).dtype == np.float32
    assert float(total) == pytest.approx(1.0 + 3.0 / 4.0)


def test_one_device_is_one_replica():
    value = ops.ones(())
    replicas, total = sum_over_replicas(value)
    assert replicas == 1.0 and float(total) == 1.0


def test_the_score_function_term_is_zero_with_the_reinforce_gradient():
    logits = tf.Variable([0.3, -0.2, 0.5])
    baseline = keras.Variable([3.0, 2.0], dtype="float32", trainable=False)  # mean 1.5
    data_loss = ops.convert_to_tensor(2.5)
    with tf.GradientTape() as tape:
        log_pi = tf.nn.log_softmax(logits)
        term = score_function_term([log_pi[1], log_pi[2]], baseline, data_loss)
    assert float(term) == 0.0
    pi = _numpy(tf.nn.softmax(logits)).astype(np.float64)
    want = (2.5 - 1.5) * ((np.arange(3) == 1) + (np.arange(3) == 2) - 2 * pi)
    np.testing.assert_allclose(_numpy(tape.gradient(term, logits)), want, rtol=1e-5)
    decay = BASELINE_DECAY
    np.testing.assert_allclose(
        _numpy(baseline), [decay * 3.0 + (1 - decay) * 2.5, decay * 2.0 + (1 - decay)], rtol=1e-6
    )


def test_the_first_baseline_is_the_loss_itself():
    baseline = keras.Variable([0.0, 0.0], dtype="float32", trainable=False)
    logits = tf.Variable([0.0, 0.0])
    with tf.GradientTape() as tape:
        term = score_function_term([tf.nn.log_softmax(logits)[0]], baseline, ops.ones(()))
    # L - b = 0 at the first step: no push either way.
    np.testing.assert_allclose(_numpy(tape.gradient(term, logits)), [0.0, 0.0], atol=1e-7)
