"""Where a run writes: `RunPaths`, chosen by `run_paths` and made by `prepare_output`.

Under `output_dir`:

    logs/<model_name>/              TensorBoard (train/, valid/) and training.log
    checkpoints/<model_name>/       the run's folder (partf.run_folder): config.json,
                                    ckpt-<step>.npz, results.json, the .keras model
    plots/<model_name>/             step<N>.png heatmaps, pi.gif
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from partf.run_folder import RunFolder
from partf.training.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """Where one run writes (see the module docstring)."""

    root: Path
    model_name: str

    @property
    def logs(self) -> Path:
        return self.root / "logs" / self.model_name

    @property
    def folder(self) -> RunFolder:
        return RunFolder.of(self.root, self.model_name)

    @property
    def checkpoints(self) -> Path:
        return self.folder.path

    @property
    def plots(self) -> Path:
        return self.root / "plots" / self.model_name

    @property
    def training_log(self) -> Path:
        return self.logs / "training.log"


def run_paths(config: TrainConfig, strategy: tf.distribute.Strategy | None) -> RunPaths:
    """Where this process writes: under multi_worker, workers other than the chief write
    under output_dir/<task_type>_<task_id>/."""
    paths = RunPaths(Path(config.output_dir), config.model_name)
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if not task_type:
        return paths
    task_id = resolver.task_id or 0
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    if task_type == "chief" or (task_type == "worker" and task_id == 0 and not has_chief):
        return paths
    return RunPaths(Path(config.output_dir) / f"{task_type}_{task_id}", config.model_name)


def prepare_output(paths: RunPaths, config: TrainConfig) -> None:
    """Creates the output folders (emptied first with --overwrite) and checks they are
    writable.

    Raises:
        ConfigError: the folders cannot be written.
    """
    try:
        for folder in (paths.logs, paths.checkpoints, paths.plots):
            if config.overwrite and folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True, exist_ok=True)
        probe = paths.checkpoints / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"cannot write under --output_dir {config.output_dir!r} ({e.strerror}); "
            "choose a writable folder."
        ) from None
