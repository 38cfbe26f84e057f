"""tau schedules against their closed forms; trainable tau."""

import math

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.layers.temperature import Temperature, scheduled_temperature
from tests.layer_checks import assert_config_round_trip


@pytest.mark.parametrize(
    "schedule, expected",
    [
        ("exponential", lambda f: 2.0 * (0.1 / 2.0) ** f),
        ("linear", lambda f: 2.0 + (0.1 - 2.0) * f),
        ("cosine", lambda f: 0.1 + 0.5 * (2.0 - 0.1) * (1 + math.cos(math.pi * f))),
        ("constant", lambda f: 2.0),
    ],
)
def test_schedules(schedule, expected):
    layer = Temperature(schedule, tau_start=2.0, tau_end=0.1, tau_steps=400)
    for step in (0, 100, 250, 400, 1000):
        got = float(layer(ops.convert_to_tensor(step, "int64")))
        assert got == pytest.approx(expected(min(step, 400) / 400), rel=1e-5)


def test_exponential_matches_original_decay_when_starting_at_one():
    # The original: ExponentialDecay(tau_start, decay_steps=total, decay_rate=tau_end).
    got = float(scheduled_temperature(300, "exponential", 1.0, 0.2, 1000))
    assert got == pytest.approx(0.2 ** (300 / 1000), rel=1e-6)


def test_trainable_tau_receives_gradients():
    layer = Temperature("linear", tau_start=0.7, tau_end=0.1, tau_steps=10, tau_is_trainable=True)
    assert len(layer.trainable_weights) == 1
    with tf.GradientTape() as tape:
        tau = layer(ops.convert_to_tensor(5))
    assert float(tau) == pytest.approx(0.7, rel=1e-6)  # the schedule is ignored
    assert float(tape.gradient(tau, layer.log_tau)) == pytest.approx(0.7, rel=1e-5)


def test_config_and_errors():
    layer = Temperature("cosine", 3.0, 0.5, 77, tau_is_trainable=True, name="tau")
    clone = assert_config_round_trip(layer)
    np.testing.assert_allclose(float(clone.log_tau), math.log(3.0), rtol=1e-6)
    with pytest.raises(ValueError, match="unknown tau_schedule 'step'"):
        Temperature("step")
    with pytest.raises(ValueError, match="must be positive"):
        Temperature(tau_end=0.0)
    with pytest.raises(ValueError, match="tau_steps must be >= 1"):
        Temperature(tau_steps=0)
