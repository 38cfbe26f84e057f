"""A fake model and a fake `Model.fit` loop for the callback tests."""

from __future__ import annotations

import numpy as np


class FakeModel:
    """The few model attributes the callbacks use."""

    candidate_names = ["attention", "dense", "identity"]

    def __init__(self):
        self.stop_training = False
        self.resets = []

    def reset_state(self, which="all"):
        self.resets.append(which)

    def tau(self):
        return np.float32(0.5)

    def pi(self):
        return np.full((2, 3), 1 / 3, np.float32)


def attach(callback, model):
    callback.set_model(model)
    return callback


def fit(callbacks, segment, progress, steps_per_execution, losses=None):
    """Drives callbacks the way Model.fit does for one segment."""
    progress.segment = segment
    for callback in callbacks:
        callback.on_train_begin()
    for epoch in range(segment.initial_epoch, segment.epochs):
        for callback in callbacks:
            callback.on_epoch_begin(epoch)
        for begin in range(0, segment.limit - segment.skip, steps_per_execution):
            logs = {"loss": (losses or {}).get(begin, 1.0)}
            for callback in callbacks:
                callback.on_train_batch_end(begin + steps_per_execution - 1, logs)
            if any(c.model.stop_training for c in callbacks):
                break
        for callback in callbacks:
            callback.on_epoch_end(epoch, {"loss": 1.0})
        if any(c.model.stop_training for c in callbacks):
            break
