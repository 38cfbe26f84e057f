"""A run's folder, checkpoints/<model_name>/ under its --output_dir: `RunFolder` is the
one place that knows what a run keeps there.

    config.json         the run's resolved configuration, written as it starts
    ckpt-<step>.npz     its checkpoints, newest last
    selection.json      the blocks --drop_attention replaced
    cost_table.json     a search's measured costs (--search_cost=time)
    <model_name>.keras  the trained model, written as the run finishes
    results.json        written last: the run is finished

A file that cannot be used is refused in one line naming it. Nothing here imports Keras
or TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import zipfile
from pathlib import Path
from typing import Any

from partf.errors import DataError
from partf.serialization import FormatError, check_format, format_problem

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
RESULTS_FILE = "results.json"
SELECTION_FILE = "selection.json"
COST_TABLE_FILE = "cost_table.json"
_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.npz$")

#: A checkpoint read back: (group -> its arrays in saved order, the meta record, its path).
Checkpoint = tuple[dict[str, list[Any]], dict[str, Any], Path]


class RunFolderError(DataError):
    """A file of a run folder that is missing or cannot be read: one line naming it."""


class CheckpointError(ValueError):
    """A checkpoint cannot be used (unreadable, or from another configuration)."""


class CheckpointFormatError(CheckpointError, FormatError):
    """A checkpoint of another partf format: readable, but not by this partf."""


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """The folder of one run (module docstring), checkpoints/<model_name>: `path`'s name is
    the run's model_name."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of(cls, output_dir: str | os.PathLike, model_name: str) -> RunFolder:
        """The folder of run `model_name` written under `output_dir`."""
        return cls(Path(output_dir) / "checkpoints" / model_name)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def selection_path(self) -> Path:
        return self.path / SELECTION_FILE

    @property
    def cost_table_path(self) -> Path:
        return self.path / COST_TABLE_FILE

    @property
    def model_file(self) -> Path:
        """The .keras file the run writes as it finishes: <model_name>.keras."""
        return self.path / f"{self.name}.keras"

    @property
    def finished(self) -> bool:
        """Whether the run finished (its results.json, written last, exists)."""
        return self.results_path.is_file()

    def checkpoint_path(self, step: int) -> Path:
        """Where the checkpoint of `step` (updates done) is written."""
        return self.path / f"ckpt-{int(step):08d}.npz"

    def checkpoints(self) -> list[tuple[int, Path]]:
        """(step, path) of every checkpoint by its name, oldest first (none are read)."""
        if not self.path.is_dir():
            return []
        found = (_CHECKPOINT.match(path.name) for path in self.path.iterdir())
        return sorted((int(m.group(1)), self.path / m.group(0)) for m in found if m)

    def newest_step(self) -> int | None:
        """The step of the newest checkpoint by its name, or None."""
        found = self.checkpoints()
        return found[-1][0] if found else None

    def newest_checkpoint(
        self, fix: str = "move the folder away or train the run again"
    ) -> Checkpoint | None:
        """The newest checkpoint that reads back completely (`read_checkpoint`), or None
        when there is none; a damaged newer one is skipped with a warning.

        Raises:
            CheckpointError: checkpoints exist but none reads back: one line naming the
                folder, `fix` (what to do), and what is wrong with the newest.
            CheckpointFormatError: the newest readable checkpoint is of another format.
        """
        damage = None
        for _, path in reversed(self.checkpoints()):
            try:
                groups, meta = read_checkpoint(path)
            except CheckpointFormatError:
                raise
            except CheckpointError as e:
                logger.warning("%s Trying the previous checkpoint.", e)
                damage = damage or e
                continue
            return groups, meta, path
        if damage is None:
            return None
        newest = str(damage).rstrip(".")
        raise CheckpointError(f"no checkpoint in {self.path} can be read; {fix} ({newest}).")

    def find_model_file(self) -> Path | None:
        """The run's .keras file: <model_name>.keras, else the folder's only .keras file
        (of a folder renamed since), else None (RunFolderError: several, none of that name)."""
        candidates = [self.model_file] if self.model_file.is_file() else []
        candidates = candidates or sorted(self.path.glob("*.keras"))
        if len(candidates) > 1:
            names = ", ".join(p.name for p in candidates)
            raise RunFolderError(
                f"{self.path} holds several .keras files ({names}); pass one of them"
            )
        return candidates[0] if candidates else None

    def read_config(self, what: str | None = None) -> dict[str, Any]:
        """config.json: {"format", "model", "training"}, as partf-train wrote it; `what`
        names the file in messages (default its path). RunFolderError: missing or
        unreadable; FormatError: of another partf format."""
        return self._read(self.config_path, what, "partf-train writes it as a run starts")

    def read_results(self, what: str | None = None) -> dict[str, Any]:
        """results.json of the finished run; arguments and errors as `read_config`."""
        return self._read(self.results_path, what, "partf-train writes it as a run finishes")

    def _read(self, path: Path, what: str | None, written: str) -> dict[str, Any]:
        what = what or str(path)
        if not path.is_file():
            raise RunFolderError(
                f"{what} is missing ({written}); pass the checkpoints/<model_name> folder of "
                "a run that wrote it"
            )
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise RunFolderError(
                f"cannot read {what} ({e}); restore the file or train the run again"
            ) from None
        if not isinstance(record, dict):
            raise RunFolderError(f"cannot read {what}: it holds no JSON object")
        check_format(record, what)
        return record


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """(group -> list of arrays in saved order, meta record) of one checkpoint, read fully
    and checked (the zip's CRCs). CheckpointError: truncated, corrupt or not a partf
    checkpoint; CheckpointFormatError: of another format (one line: which, what to do)."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode("utf-8"))
            problem = format_problem(meta, f"checkpoint {path}")
            if problem is not None:
                raise CheckpointFormatError(problem)
            groups: dict[str, list[Any]] = {}
            for group, entries in meta["layout"].items():
                groups[group] = [data[f"{group}/{i}"] for i in range(len(entries))]
    except CheckpointFormatError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"checkpoint {path} is unreadable ({e}).") from None
    return groups, meta
