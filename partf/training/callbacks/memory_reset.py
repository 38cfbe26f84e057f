"""`MemoryReset`: the training memory starts empty at each epoch start.

An epoch starts every stream over from its beginning, so the memory of the previous
epoch's last batch (the streams' ends) is no context for its first batch.
"""

from __future__ import annotations

from typing import Any

import keras

from partf.training.run_state import RunProgress


class MemoryReset(keras.callbacks.Callback):
    """Empties the training memory when an epoch starts from its first batch.

    A run resumed in the middle of an epoch keeps the memory restored from the checkpoint.
    """

    def __init__(self, progress: RunProgress) -> None:
        super().__init__()
        self.progress = progress

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.progress.step_in_epoch == 0:
            self.model.reset_state("train")
