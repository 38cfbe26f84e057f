"""Training checkpoints for exact resume, written atomically.

A checkpoint is one `.npz` file, `ckpt-<step>.npz`, holding every variable a run needs to
continue bit for bit: the model's (weights, XL memory and other state, the step counter,
the random generators' states), the optimizer's, and the running loss metric's; plus a
JSON `meta` record (step, epoch, position in the epoch, configuration, variable paths).

Atomicity: the file is written under a temporary name in the same folder, flushed to disk
(`fsync`), then renamed over its final name (`os.replace`, atomic on POSIX), and the folder
is synced. A kill at any moment leaves either the old set of checkpoints or the new one,
never a half-written `ckpt-*.npz`; leftover temporary files are ignored and cleaned up.
On load the newest checkpoint that reads back completely (zip CRCs checked) is used, so
even a file damaged later on disk falls back to the one before.

Example:
    >>> manager = CheckpointManager("checkpoints/base", keep=5)
    >>> manager.save(step, {"model": model.variables}, meta={"epoch": 0})
    >>> arrays, meta = manager.load_latest()
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^ckpt-(\d+)\.npz$")
_TMP_PREFIX = ".tmp-"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `data` to `path` so that readers see the old file or the new one, never half.

    Args:
        path: destination; its folder must exist.
        data: the complete contents.
    """
    path = Path(path)
    tmp = path.with_name(f"{_TMP_PREFIX}{os.getpid()}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def _write_all(f: Any, data: bytes) -> None:
    """Writes `data` in two halves. Between them, the interruption tests make the writer
    pause (PARTF_TEST_WRITE_PAUSE seconds) so that a kill lands mid-write."""
    half = len(data) // 2
    f.write(data[:half])
    pause = os.environ.get("PARTF_TEST_WRITE_PAUSE")
    if pause:
        f.flush()
        time.sleep(float(pause))
    f.write(data[half:])


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every platform can open a folder.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class CheckpointError(ValueError):
    """A checkpoint cannot be used (unreadable, or from another configuration)."""


class CheckpointManager:
    """Saves, lists, prunes and loads the checkpoints of one run folder.

    Args:
        directory: the run's checkpoint folder (created if missing).
        keep: how many of the newest checkpoints to keep.
    """

    def __init__(self, directory: str | os.PathLike, keep: int = 5) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}.")
        self.directory = Path(directory)
        self.keep = keep

    def checkpoints(self) -> list[tuple[int, Path]]:
        """(step, path) of every complete checkpoint, oldest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def save(
        self,
        step: int,
        groups: Mapping[str, Sequence[Any]],
        meta: Mapping[str, Any],
    ) -> Path:
        """Writes checkpoint `ckpt-<step>.npz` atomically and prunes old ones.

        Args:
            step: the global step (number of updates done).
            groups: name -> list of variables (or arrays), e.g. {"model": model.variables}.
                Stored in order with their paths, and restored in the same order.
            meta: JSON-serializable record stored alongside.

        Returns:
            The checkpoint's path.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        layout: dict[str, list[list[Any]]] = {}
        for group, variables in groups.items():
            layout[group] = []
            for i, variable in enumerate(variables):
                value = np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)
                arrays[f"{group}/{i}"] = value
                layout[group].append([getattr(variable, "path", str(i)), list(value.shape)])
        record = dict(meta, step=int(step), layout=layout)
        arrays["meta"] = np.frombuffer(json.dumps(record).encode("utf-8"), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        path = self.directory / f"ckpt-{int(step):08d}.npz"
        atomic_write_bytes(path, buffer.getvalue())
        self._prune()
        return path

    def _prune(self) -> None:
        for _, path in self.checkpoints()[: -self.keep]:
            with contextlib.suppress(OSError):
                path.unlink()
        for path in self.directory.glob(f"{_TMP_PREFIX}*"):
            # Temporary files of a writer that was killed (ours are renamed at once).
            if not path.name.startswith(f"{_TMP_PREFIX}{os.getpid()}-"):
                with contextlib.suppress(OSError):
                    path.unlink()

    @staticmethod
    def load(path: str | os.PathLike) -> tuple[dict[str, list[np.ndarray]], dict[str, Any]]:
        """Reads one checkpoint fully, checking its integrity.

        Returns:
            (group -> list of arrays in saved order, meta record).

        Raises:
            CheckpointError: the file is truncated, corrupt or not a partf checkpoint.
        """
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode("utf-8"))
                groups: dict[str, list[np.ndarray]] = {}
                for group, entries in meta["layout"].items():
                    groups[group] = [data[f"{group}/{i}"] for i in range(len(entries))]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            raise CheckpointError(f"checkpoint {path} is unreadable ({e}).") from None
        return groups, meta

    def load_latest(self) -> tuple[dict[str, list[np.ndarray]], dict[str, Any], Path] | None:
        """The newest checkpoint that reads back completely, or None if there is none.

        A damaged newer file is skipped with a warning, so the one before it is used.
        """
        for _, path in reversed(self.checkpoints()):
            try:
                groups, meta = self.load(path)
            except CheckpointError as e:
                logger.warning("%s Trying the previous checkpoint.", e)
                continue
            return groups, meta, path
        return None


def restore_variables(variables: Sequence[Any], arrays: Sequence[np.ndarray], what: str) -> None:
    """Assigns saved arrays to variables in order, checking count and shapes.

    Args:
        variables: the live variables, in the order they were saved.
        arrays: the saved values.
        what: a name for messages ("model", "optimizer").

    Raises:
        CheckpointError: the counts or a shape differ (another configuration).
    """
    if len(variables) != len(arrays):
        raise CheckpointError(
            f"the checkpoint has {len(arrays)} {what} variables but this run has "
            f"{len(variables)}; it was written with another configuration."
        )
    for variable, value in zip(variables, arrays, strict=True):
        if tuple(variable.shape) != tuple(value.shape):
            raise CheckpointError(
                f"{what} variable {variable.path} has shape {tuple(variable.shape)} but the "
                f"checkpoint holds {tuple(value.shape)}; it was written with another "
                "configuration."
            )
        variable.assign(value)
