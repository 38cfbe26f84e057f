"""Checkpoints for exact resume: `CheckpointManager` (the `ckpt-<step>.npz` files of one
folder), `CheckpointWriter` (what the `Checkpointer` callback saves) and `restore`
(loads the newest checkpoint into a built run and says where it picks up).

A checkpoint holds every variable a run needs to continue bit for bit (the model's, the
optimizer's, the running loss's) and a JSON `meta` record (step, configuration, variable
paths, format). It is written atomically (partf.atomic), and the run folder
(partf.run_folder) uses the newest that reads back completely, so a damaged file falls
back to the one before. Each variable is restored from the array saved under the same
key (`variable_key`), so models may make their variables in any order; a variable
without an array or an array without a variable is a one-line `CheckpointError`. A
checkpoint of another format is refused (`CheckpointFormatError`), not skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from partf.atomic import TMP_PREFIX, atomic_write_bytes
from partf.run_folder import CheckpointError, RunFolder
from partf.serialization import FORMAT_KEY, FORMAT_VERSION
from partf.training.config import (
    RESUMABLE_CHANGES,
    ConfigError,
    check_saved_config,
)
from partf.training.run_state import Clock, attach_fit_state

if TYPE_CHECKING:
    from partf.training.build import Built

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SavedCheckpoint:
    """A checkpoint on disk: the step it holds and its path."""

    step: int
    path: str


class CheckpointManager:
    """Saves and prunes the checkpoints of one run folder (read through `RunFolder`),
    keeping the `keep` newest; `directory` is created if missing."""

    def __init__(self, directory: str | os.PathLike, keep: int = 5) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}.")
        self.directory = Path(directory)
        self.folder = RunFolder(self.directory)
        self.keep = keep

    def save(
        self,
        step: int,
        groups: Mapping[str, Sequence[Any]],
        meta: Mapping[str, Any],
    ) -> Path:
        """Writes `ckpt-<step>.npz` (`step`: updates done) atomically, prunes old ones and
        returns its path. `groups`: name -> variables (or arrays), e.g. {"model":
        model.variables}, stored with their paths (an array's is its index); `meta`: a
        JSON-serializable record stored alongside."""
        self.directory.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        layout: dict[str, list[list[Any]]] = {}
        for group, variables in groups.items():
            layout[group] = []
            for i, variable in enumerate(variables):
                value = np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)
                arrays[f"{group}/{i}"] = value
                layout[group].append([getattr(variable, "path", str(i)), list(value.shape)])
        record = dict(meta, step=int(step), layout=layout, **{FORMAT_KEY: FORMAT_VERSION})
        arrays["meta"] = np.frombuffer(json.dumps(record).encode("utf-8"), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        path = self.folder.checkpoint_path(step)
        atomic_write_bytes(path, buffer.getvalue())
        self._prune()
        return path

    def _prune(self) -> None:
        for _, path in self.folder.checkpoints()[: -self.keep]:
            with contextlib.suppress(OSError):
                path.unlink()
        for path in self.directory.glob(f"{TMP_PREFIX}*"):
            # Temporary files of a writer that was killed (ours are renamed at once).
            if not path.name.startswith(f"{TMP_PREFIX}{os.getpid()}-"):
                with contextlib.suppress(OSError):
                    path.unlink()


#: A name Keras numbers per process ("seed_generator_12"): a seed generator made without
#: a name gets the next free number, which depends on what the process made before, so it
#: cannot identify a variable across processes.
_NUMBERED = re.compile(r"\b(seed_generator)_\d+\b")

#: What a checkpoint that does not fit the run is, and what to do.
_ANOTHER_CONFIGURATION = (
    "it was written with another configuration: pass the run's flags, or start a new --output_dir"
)


def variable_key(path: str, group: str, root: str | None) -> str:
    """The key a variable of checkpoint `group` is matched by on restore: its `path`, less
    what is not its own: the model's name `root` (partf-generate names a model after its
    run folder; Keras numbers unnamed ones), the optimizer's name inside an optimizer
    variable's path (Keras numbers unnamed optimizers per process, and a search's split
    optimizer holds two), and seed generators' numbers (`_NUMBERED`). Keys that still
    collide are matched in order among themselves.
    """
    parts = path.split("/")
    if group == "optimizer" and len(parts) > 1:
        parts = parts[1:]
        if root and parts[0].startswith(f"{root}_"):
            parts[0] = parts[0][len(root) + 1 :]
    elif root and len(parts) > 1 and parts[0] == root:
        parts = parts[1:]
    return _NUMBERED.sub(r"\1", "/".join(parts))


def saved_root(meta: Mapping[str, Any]) -> str | None:
    """The saved model's name, as the meta record has it ("model_name"), or None."""
    name = meta.get("model_name")
    return None if name is None else str(name)


def saved_paths(meta: Mapping[str, Any], group: str) -> list[str]:
    """The paths of a group's saved variables, in saved order (none for a missing group)."""
    return [str(path) for path, *_ in meta["layout"].get(group, [])]


def _by_key(keys: Sequence[str]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        found.setdefault(key, []).append(i)
    return found


def _listed(keys: Sequence[str], most: int = 3) -> str:
    shown = ", ".join(keys[:most])
    return shown + (f" and {len(keys) - most} more" if len(keys) > most else "")


def matched_arrays(
    variables: Sequence[Any],
    arrays: Sequence[np.ndarray],
    what: str,
    saved_paths: Sequence[str],
    *,
    root: str | None = None,
    saved_model_root: str | None = None,
) -> list[tuple[Any, np.ndarray]]:
    """(variable, array) pairs, in the variables' order: each live variable with the saved
    array (`arrays`, in the order of the layout's `saved_paths`) of the same key
    (`variable_key` in group `what`, less the live model's name `root` or the saved one's,
    `saved_model_root`, default `root`). Variables whose keys collide (seed generators made
    outside any layer, a search's two optimizers' "iteration") are matched in order among
    themselves.

    Raises:
        CheckpointError: a variable has no saved array, an array no variable, or a shape
            differs (another configuration); one line.
    """
    fix = _ANOTHER_CONFIGURATION
    if len(saved_paths) != len(arrays):
        raise CheckpointError(f"the checkpoint's {what} layout does not match its arrays.")
    saved_model_root = root if saved_model_root is None else saved_model_root
    live = _by_key([variable_key(v.path, what, root) for v in variables])
    saved = _by_key([variable_key(p, what, saved_model_root) for p in saved_paths])
    missing = [k for k in live if len(saved.get(k, ())) < len(live[k])]
    extra = [k for k in saved if len(live.get(k, ())) < len(saved[k])]
    if missing or extra:
        parts = [f"not saved: {_listed(missing)}"] if missing else []
        parts += [f"not in this run: {_listed(extra)}"] if extra else []
        raise CheckpointError(
            f"the checkpoint's {what} variables do not match this run's ({'; '.join(parts)}); "
            f"{fix}."
        )
    index = {i: j for key, found in live.items() for i, j in zip(found, saved[key], strict=True)}
    pairs = [(variable, arrays[index[i]]) for i, variable in enumerate(variables)]
    for variable, value in pairs:
        if tuple(variable.shape) != tuple(value.shape):
            raise CheckpointError(
                f"{what} variable {variable.path} has shape {tuple(variable.shape)} but the "
                f"checkpoint holds {tuple(value.shape)}; {fix}."
            )
    return pairs


def restore_variables(
    variables: Sequence[Any],
    arrays: Sequence[np.ndarray],
    what: str,
    saved_paths: Sequence[str],
    **keys: Any,
) -> None:
    """Assigns saved arrays to the variables of the same path: arguments and errors as
    `matched_arrays` (`keys`: its `root` and `saved_model_root`); nothing is assigned
    unless every variable finds its array of the same shape."""
    for variable, value in matched_arrays(variables, arrays, what, saved_paths, **keys):
        variable.assign(value)


# ------------------------------------------------------------- during a run
@dataclasses.dataclass(frozen=True)
class CheckpointWriter:
    """Writes a checkpoint of `built.state_groups()` with `clock`'s wall time through
    `manager`: the `Checkpointer`'s `save`."""

    manager: CheckpointManager
    built: Built
    clock: Clock

    def __call__(self, step: int, train_loss: float | None) -> str:
        """Writes the checkpoint of `step` and returns its path (see `CheckpointManager.save`)."""
        attach_fit_state(self.built.model)  # JAX: the values fit holds, in the variables
        meta = {
            "config": self.built.full_config,
            "train_loss": train_loss,
            "elapsed_seconds": self.clock.seconds(),
            "architecture": self.built.model.architecture_string(),
            "model_name": self.built.model.name,  # dropped from the keys on restore
        }
        return str(self.manager.save(step, self.built.state_groups(), meta))


# ----------------------------------------------------------------- resuming
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


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The settings that differ between a checkpoint's full configuration (every setting:
    `check_saved_config`) and this run's (`Built.full_config`), as "name: before -> after"
    lines; those a run may change on resume are left out."""
    differences = []
    for part, skipped in (("model", ()), ("training", RESUMABLE_CHANGES)):
        for key in sorted(set(saved[part]) | set(current[part])):
            before, after = saved[part].get(key), current[part].get(key)
            if key not in skipped and before != after:
                differences.append(f"{key}: {before!r} -> {after!r}")
    return differences


def restore(folder: Path, built: Built, batches_per_epoch: int) -> Resumed:
    """Loads the newest checkpoint in `folder` (checkpoints/<model_name>/) into the built
    model and says where the run picks up (`Resumed()` without a checkpoint);
    `batches_per_epoch` tells whether the checkpoint is mid-epoch.

    Raises:
        CheckpointError: checkpoints exist but none can be read.
        FormatError: the checkpoint's configuration lacks a setting.
        ConfigError: the checkpoint is of a run with another configuration.
    """
    fix = "move the folder away or pass --overwrite to start again"
    latest = RunFolder(folder).newest_checkpoint(fix)
    if latest is None:
        return Resumed()
    groups, meta, path = latest
    check_saved_config(meta["config"], f"checkpoint {path}")
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
