"""Saving a run: `CheckpointWriter`, the `save` the `Checkpointer` callback calls (it
writes `Built.state_groups()` with the run's configuration).
"""

from __future__ import annotations

import dataclasses

from partf.training.build import Built
from partf.training.checkpoint import CheckpointManager
from partf.training.run_state import Clock, attach_fit_state


@dataclasses.dataclass(frozen=True)
class CheckpointWriter:
    """Writes a checkpoint of the current state: the `Checkpointer`'s `save`.

    Args:
        manager: the run's `CheckpointManager` (it keeps the newest few).
        built: the run's model; what is saved is `built.state_groups()`.
        clock: the run's wall time, recorded for a resume.
    """

    manager: CheckpointManager
    built: Built
    clock: Clock

    def __call__(self, step: int, train_loss: float | None) -> str:
        """Writes the checkpoint of `step` and returns its path (see `checkpoint.py`)."""
        attach_fit_state(self.built.model)  # JAX: the values fit holds, in the variables
        meta = {
            "config": self.built.full_config,
            "train_loss": train_loss,
            "elapsed_seconds": self.clock.seconds(),
            "architecture": self.built.model.architecture_string(),
            "model_name": self.built.model.name,  # dropped from the keys on restore
        }
        return str(self.manager.save(step, self.built.state_groups(), meta))
