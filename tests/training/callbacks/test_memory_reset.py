"""MemoryReset with the host-side step count: memory resets at epoch starts, not at a
mid-epoch resume."""

from __future__ import annotations

from partf.training.callbacks.memory_reset import MemoryReset
from partf.training.callbacks.progress import ProgressTracker
from partf.training.run_state import RunProgress, Segment
from tests.training.callbacks.helpers import FakeModel, attach, fit


def test_steps_are_counted_on_the_host_and_memory_resets_at_epoch_starts():
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=10, total_steps=30, tokens_per_batch=4)
    seen = []

    class Record(ProgressTracker):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            seen.append(progress.global_step)

    callbacks = [attach(Record(progress), model), attach(MemoryReset(progress), model)]
    # Resumed at step 14: the rest of epoch 1 (a short last execution), then epoch 2.
    fit(callbacks, Segment(1, 2, 4, 10), progress, steps_per_execution=4)
    assert seen == [18, 20] and model.resets == []  # mid-epoch resume keeps the memory
    fit(callbacks, Segment(2, 3, 0, 10), progress, steps_per_execution=4)
    assert seen == [18, 20, 24, 28, 30] and model.resets == ["train"]
