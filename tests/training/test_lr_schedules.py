"""Learning-rate schedules: values against the formulas, in-graph and host forms agree."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from partf.training.lr_schedules import (
    Constant,
    Delayed,
    InverseSqrt,
    WarmupCosine,
    build_schedule,
)


def _graph_values(schedule, steps):
    return np.array([float(schedule(np.int64(s))) for s in steps])


def test_warmup_cosine_hits_its_landmarks():
    schedule = WarmupCosine(max_lr=1e-3, warmup_steps=100, total_steps=1100)
    assert schedule.value_at(0) == 0.0
    assert schedule.value_at(50) == pytest.approx(5e-4)
    assert schedule.value_at(100) == pytest.approx(1e-3)
    # Half-way through the decay the cosine is at half the peak.
    assert schedule.value_at(600) == pytest.approx(5e-4)
    assert schedule.value_at(1100) == pytest.approx(0.0, abs=1e-12)
    assert schedule.value_at(5000) == pytest.approx(0.0, abs=1e-12)


def test_warmup_cosine_matches_the_original_formula():
    # The original project's CosineSchedule with decay_steps = total - warmup.
    max_lr, warmup, total = 1e-4, 40, 300
    steps = np.arange(0, 320, 7)
    angle = math.pi * np.maximum(steps - warmup, 0) / (total - warmup)
    original = np.minimum(max_lr * steps / warmup, 0.5 * max_lr * (1 + np.cos(angle)))
    original[steps > total] = 0.0  # the original's cosine rises again past the end
    schedule = WarmupCosine(max_lr, warmup, total)
    np.testing.assert_allclose(_graph_values(schedule, steps), original, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose([schedule.value_at(int(s)) for s in steps], original, rtol=1e-9)


def test_warmup_cosine_without_warmup_starts_at_peak():
    schedule = WarmupCosine(2e-3, 0, 10)
    assert schedule.value_at(0) == pytest.approx(2e-3)
    assert float(schedule(0)) == pytest.approx(2e-3)


def test_inverse_sqrt_is_the_transformer_schedule():
    d_model, warmup = 128, 4000
    schedule = InverseSqrt(max_lr=(d_model * warmup) ** -0.5, warmup_steps=warmup)
    for step in (1, 100, 3999, 4000, 4001, 20000):
        noam = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert schedule.value_at(step) == pytest.approx(noam, rel=1e-9)
        assert float(schedule(step)) == pytest.approx(noam, rel=1e-5)


def test_constant_and_delayed_are_zero_while_frozen():
    frozen = Constant(1e-2, delay_steps=10)
    assert [frozen.value_at(s) for s in (0, 9, 10, 11)] == [0.0, 0.0, 1e-2, 1e-2]
    np.testing.assert_allclose(_graph_values(frozen, [0, 9, 10]), [0.0, 0.0, 1e-2])
    delayed = Delayed(WarmupCosine(1.0, 10, 20), delay_steps=5)
    assert delayed.value_at(4) == 0.0
    assert delayed.value_at(5) == pytest.approx(0.5)
    assert float(delayed(np.int64(5))) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "schedule",
    [WarmupCosine(1e-3, 4, 50), InverseSqrt(1e-3, 4), Constant(3e-4, 2), Delayed(Constant(1.0), 3)],
)
def test_schedules_serialize(schedule):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert type(restored) is type(schedule)
    for step in (0, 3, 4, 10, 60):
        assert restored.value_at(step) == schedule.value_at(step)


def test_build_schedule_rejects_unknown_names():
    assert isinstance(build_schedule("cosine", 1e-3, 2, 10), WarmupCosine)
    with pytest.raises(ValueError, match="valid names: cosine, inverse_sqrt, constant"):
        build_schedule("linear", 1e-3, 2, 10)
    with pytest.raises(ValueError, match="warmup_steps > 0"):
        InverseSqrt(1e-3, 0)
