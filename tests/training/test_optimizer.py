"""The optimizer: names, clipping, and separate settings for the architecture logits."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.training.lr_schedules import WarmupCosine
from partf.training.optimizer import ArchSettings, ArchSplitOptimizer, build_optimizer


class TwoVariables(keras.Model):
    """One ordinary weight and one architecture-logit weight."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.w = self.add_weight(shape=(3,), initializer="ones", name="w")
        self.logits = self.add_weight(shape=(2, 3), initializer="zeros", name="arch_logits")

    def call(self, x):
        return x * keras.ops.sum(self.w) + keras.ops.sum(self.logits)


def _train(optimizer, steps):
    model = TwoVariables(name="two")
    model.compile(optimizer=optimizer, loss="mse", steps_per_execution=1)
    x = np.ones((steps, 1), "float32")
    y = np.full((steps, 1), -1.0, "float32")
    w_history, a_history = [], []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            w_history.append(model.w.numpy().copy())
            a_history.append(model.logits.numpy().copy())

    model.fit(x, y, batch_size=1, epochs=1, verbose=0, shuffle=False, callbacks=[Record()])
    return model, np.array(w_history), np.array(a_history)


def test_shared_by_default_like_the_original():
    optimizer = build_optimizer("Adam", 1e-3, arch=ArchSettings())
    assert type(optimizer) is keras.optimizers.Adam
    optimizer = build_optimizer("sgd", 1e-3, clipvalue=0.5)
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert optimizer.clipvalue == 0.5


def test_unknown_optimizer_lists_valid_names():
    with pytest.raises(ValueError, match="unknown opt_name 'adamx'; valid names: .*adam"):
        build_optimizer("adamx", 1e-3)


def test_arch_logits_frozen_then_learn_at_their_own_rate():
    freeze = 3
    optimizer = build_optimizer(
        "sgd", 1e-3, arch=ArchSettings(lr=0.1, weight_decay=None, freeze_steps=freeze)
    )
    assert isinstance(optimizer, ArchSplitOptimizer)
    model, w, a = _train(optimizer, steps=6)
    # Frozen for the first `freeze` updates, then plain SGD steps of rate 0.1.
    np.testing.assert_array_equal(a[:freeze], 0.0)
    # First unfrozen update: d loss / d logit = 2 * (prediction - target), prediction
    # = sum(w) + sum(logits) with the values before the update; SGD moves by 0.1 * that.
    gradient = 2.0 * (w[freeze - 1].sum() + 0.0 - (-1.0))
    np.testing.assert_allclose(a[freeze], -0.1 * gradient, rtol=1e-5)
    assert np.all(np.diff(w, axis=0) != 0.0)  # the ordinary weight learns from step 1
    assert optimizer.iterations.numpy() == 6
    assert len(optimizer.variables) > 0


def test_arch_freeze_alone_follows_the_main_schedule_afterwards():
    schedule = WarmupCosine(1e-2, 0, 100)
    split = build_optimizer("sgd", schedule, arch=ArchSettings(freeze_steps=2))
    _, _, a = _train(split, steps=4)
    np.testing.assert_array_equal(a[:2], 0.0)
    assert np.all(a[2] != 0.0)
    # The logits' rate is the model's schedule, at the same step count.
    assert split.arch.iterations.numpy() == split.iterations.numpy() == 4
    assert float(split.arch.learning_rate) == pytest.approx(schedule.value_at(4), rel=1e-6)
    assert float(split.learning_rate) == pytest.approx(schedule.value_at(4), rel=1e-6)


def test_arch_weight_decay_only_touches_the_logits():
    optimizer = build_optimizer(
        "adamw", 0.0, weight_decay=0.0, arch=ArchSettings(lr=0.5, weight_decay=0.1)
    )
    model = TwoVariables(name="two")
    model.logits.assign(np.ones((2, 3), "float32"))
    zero = [np.zeros((3,), "float32"), np.zeros((2, 3), "float32")]
    optimizer.apply(zero, [model.w, model.logits])
    np.testing.assert_allclose(model.w.numpy(), 1.0)  # lr 0: untouched
    # Decoupled decay: logits *= 1 - lr * weight_decay.
    np.testing.assert_allclose(model.logits.numpy(), 1.0 - 0.5 * 0.1, rtol=1e-6)


def test_split_optimizer_serializes():
    optimizer = build_optimizer("adam", 1e-3, arch=ArchSettings(lr=1e-2, freeze_steps=5))
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, ArchSplitOptimizer)
    assert restored.arch.learning_rate.numpy() == pytest.approx(0.0)  # still frozen at step 0
    assert restored.get_config() == optimizer.get_config()
