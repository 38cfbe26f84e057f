"""Resuming a run: `restore(folder, keep, built, batches_per_epoch) -> Resumed` loads
the newest checkpoint into the built model (partf.training.build) and says where the run
picks up; `config_differences` names what a resume would change in the saved settings.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from partf.training.build import Built
from partf.training.checkpoint import (
    CheckpointError,
    CheckpointManager,
    SavedCheckpoint,
    matched_arrays,
    restore_variables,
    saved_paths,
    saved_root,
)
from partf.training.config import RESUMABLE_CHANGES, ConfigError, TrainConfig

logger = logging.getLogger("partf.training")


@dataclasses.dataclass(frozen=True)
class Resumed:
    """Where a run picks up: from scratch (the defaults) or from a checkpoint.

    Attributes:
        step: updates already done.
        checkpoint: the checkpoint restored, or None.
        elapsed_seconds: wall time spent before the resume.
        train_loss: the running training loss the checkpoint recorded.
        metrics: (variable, value) pairs of the running loss's sums, to put back when a
            resumed epoch begins; empty unless the checkpoint is mid-epoch.
    """

    step: int = 0
    checkpoint: SavedCheckpoint | None = None
    elapsed_seconds: float = 0.0
    train_loss: float | None = None
    metrics: tuple[tuple[Any, Any], ...] = ()


def _defaults(config_class: type) -> dict[str, Any]:
    """Each field's default, JSON-safe (tuples as lists, as `to_dict` writes them)."""
    defaults = {}
    for field in dataclasses.fields(config_class):
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            continue
        defaults[field.name] = list(value) if isinstance(value, tuple) else value
    return defaults


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The settings that differ between a checkpoint's configuration and this run's.

    A setting added to `ModelConfig` or `TrainConfig` after the checkpoint was written
    counts as its default, so checkpoints of earlier versions of the same format resume.

    Args:
        saved: the checkpoint's full configuration.
        current: this run's (`Built.full_config`).

    Returns:
        "name: before -> after" lines; settings a run may change on resume are left out.
    """
    from partf.models.config import ModelConfig

    differences = []
    defaults = _defaults(ModelConfig)
    saved_model = saved["model"]
    for key in sorted(set(saved_model) | set(current["model"])):
        before = saved_model.get(key, defaults.get(key))
        if before != current["model"].get(key):
            differences.append(f"{key}: {before!r} -> {current['model'].get(key)!r}")
    defaults = _defaults(TrainConfig)
    for key in sorted(set(saved["training"]) | set(current["training"])):
        if key in RESUMABLE_CHANGES or key == "model":
            continue
        before = saved["training"].get(key, defaults.get(key))
        if before != current["training"].get(key):
            differences.append(f"{key}: {before!r} -> {current['training'].get(key)!r}")
    return differences


def restore(folder: Path, keep: int, built: Built, batches_per_epoch: int) -> Resumed:
    """Loads the newest checkpoint in `folder` into the built model, if there is one.

    Args:
        folder: checkpoints/<model_name>/.
        keep: how many checkpoints the folder keeps (--keep_checkpoints).
        built: the run's model; its variables receive the checkpoint's values.
        batches_per_epoch: B, to tell whether the checkpoint is mid-epoch.

    Returns:
        `Resumed()` when the folder holds no checkpoint, else where the run picks up.

    Raises:
        CheckpointError: checkpoints exist but none can be read.
        ConfigError: the checkpoint is of a run with another configuration.
    """
    manager = CheckpointManager(folder, keep=keep)
    latest = manager.load_latest()
    if latest is None:
        if manager.checkpoints():
            raise CheckpointError(
                f"no checkpoint in {folder} can be read; move the folder "
                "away or pass --overwrite to start again."
            )
        return Resumed()
    groups, meta, path = latest
    differences = config_differences(meta["config"], built.full_config)
    if differences:
        raise ConfigError(
            f"{folder} holds a run with another configuration "
            f"({'; '.join(differences[:3])}); pass --overwrite to start again or choose "
            "another --model_name."
        )
    live = built.state_groups()
    # Each variable takes the saved array of its own path (checkpoint.variable_key).
    keys = {"root": built.model.name, "saved_model_root": saved_root(meta)}
    for name in live:
        restore_variables(live[name], groups.get(name, []), name, saved_paths(meta, name), **keys)
    step = int(meta["step"])
    metrics: tuple[tuple[Any, Any], ...] = ()
    if step % batches_per_epoch:
        # Mid-epoch: fit() will zero the running loss; hand back its saved sums.
        variables, paths = built.model.metrics_variables, saved_paths(meta, "metrics")
        metrics = tuple(matched_arrays(variables, groups["metrics"], "metrics", paths, **keys))
    logger.info("resumed from %s at step %d", path, step)
    return Resumed(
        step=step,
        checkpoint=SavedCheckpoint(step, str(path)),
        elapsed_seconds=float(meta.get("elapsed_seconds", 0.0)),
        train_loss=meta.get("train_loss"),
        metrics=metrics,
    )
