"""What a task is: its name, its settings, how its splits are written and read, and what
it scores.

A task module of this package (`partf.tasks.<name>`) holds one module-level `TASK`, and
the registry (`partf.tasks`) finds it there; nothing else names it. Two kinds exist:

- `Task`: language modelling on records (`partf.tasks.text`): the splits are the record
  folders of `partf-build-data`, scored by perplexity.
- `DrawnTask`: a synthetic task (MQAR, copy). Its examples are drawn from a small
  settings dataclass by the module's `draw(settings, split)`, which returns (inputs,
  targets) int32 [batches, B, L] with target 0 (the ignore marker of partf's loss and
  evaluation) wherever a position is not scored, so loss and accuracy need no special
  case; accuracy (targets predicted exactly) is reported beside the loss.

A drawn task's split is a folder holding `<name>.json` (docs/data.md): the settings, the
split and the sha256 of the arrays they give, drawn again (numpy only) when it is read;
another draw is refused. The splits come from different streams of one seed (`split_rng`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from partf.atomic import atomic_write_text
from partf.errors import DataError, UsageError
from partf.serialization import FORMAT_KEY, KINDS, check_format

#: The splits and the index of each one's random stream.
SPLITS = ("train", "valid", "test")
#: Settings given by partf-build-data's own flags of the same name, not `--<task>_<name>`.
SHARED = ("seq_len", "batch_size", "vocab_size")


@dataclasses.dataclass(frozen=True)
class Task:
    """A task whose splits are record folders of text: language modelling, scored by
    perplexity. `name` is how a plan and partf-build-data's --task name it; `options`
    the dataclass whose `partf.settings.setting` fields are its partf-build-data flags
    (each `--<flag_prefix><field>`, but the shared `SHARED`)."""

    name: str
    help: str
    options: type = None  # type: ignore[assignment]

    #: Whether accuracy on the scored positions is reported beside the loss.
    scores_accuracy = False
    #: Whether the splits are drawn (a plan table of settings, `owns` a folder).
    drawn = False
    flag_prefix = ""

    def owns(self, folder: str | os.PathLike) -> bool:
        """Whether `folder` is a split of this task (record folders are anyone's)."""
        return False

    def check_build(self, values: Mapping[str, Any]) -> None:
        """Refuses bad flag values (the flags given, by setting name) before anything is
        imported or written (UsageError)."""
        self.options(**values)

    def build(self, values: Mapping[str, Any], prefix: str | None, overwrite: bool) -> None:
        """Writes the splits of the flags given (by setting name) to the folders of
        --tfrecords_directory `prefix` (None: the task's default)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class DrawnTask(Task):
    """A synthetic task drawn from `options` (its settings: a dataclass of `setting`
    fields, `seq_len`, `batch_size`, `vocab_size` and `seed` among them, with a method
    `num_batches(split)`) by `draw(settings, split)`.

    `required`: the settings a plan's table must give; `prefix(settings)`: the default
    folder prefix of partf-build-data."""

    draw: Callable[[Any, str], tuple[np.ndarray, np.ndarray]] = None  # type: ignore[assignment]
    required: tuple[str, ...] = ("seq_len", "batch_size")
    prefix: Callable[[Any], str] = None  # type: ignore[assignment]

    scores_accuracy = True
    drawn = True

    @property
    def flag_prefix(self) -> str:  # type: ignore[override]
        return f"{self.name}_"

    @property
    def marker(self) -> str:
        """The file that makes a folder a split of this task."""
        return f"{self.name}.json"

    def settings_of(self, values: Mapping[str, Any]) -> Any:
        """The settings of `values` (lists become tuples), each checked for its type here
        and for its sense by the dataclass (UsageError)."""
        hints, checked = typing.get_type_hints(self.options), {}
        for key, value in values.items():
            kind = str(hints[key])
            items = value if isinstance(value, list | tuple) and "tuple" in kind else [value]
            numbers = (int, float) if "float" in kind else (int,)
            if value is not None and not all(  # None: an optional setting left unset
                isinstance(v, numbers) and not isinstance(v, bool) for v in items or [None]
            ):
                what = "a number" if "float" in kind else "an integer"
                what += " or a list of them" if "tuple" in kind else ""
                raise UsageError(f"{key} must be {what}, not {value!r}")
            checked[key] = tuple(items) if "tuple" in kind else value
        return self.options(**checked)

    def to_dict(self, settings: Any) -> dict[str, Any]:
        values = dataclasses.asdict(settings)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}

    def check_build(self, values: Mapping[str, Any]) -> None:
        self.settings_of(values)

    def build(self, values: Mapping[str, Any], prefix: str | None, overwrite: bool) -> None:
        settings = self.settings_of(values)
        shape = f"[{settings.batch_size}, {settings.seq_len}]"
        folders = self.write(prefix or self.prefix(settings), settings, overwrite)
        for split, folder in folders.items():
            batches = settings.num_batches(split)
            logging.getLogger("partf.cli.build_data").info(
                f"{folder}: {batches} batches of {shape}"
            )

    def build_argv(self, values: Mapping[str, Any]) -> list[str]:
        """partf-build-data's arguments that write the splits of a plan's table `values`."""
        argv = [f"--task={self.name}"]
        for key, value in values.items():
            flag = key if key in SHARED else f"{self.flag_prefix}{key}"
            text = ",".join(map(str, value)) if isinstance(value, list | tuple) else value
            argv.append(f"--{flag}={text}")
        return argv

    # -------------------------------------------------------------- the splits
    def owns(self, folder: str | os.PathLike) -> bool:
        return (Path(folder) / self.marker).is_file()

    def write(
        self, prefix: str | os.PathLike, settings: Any, overwrite: bool = False
    ) -> dict[str, Path]:
        """Writes the folders `<prefix>_{train,valid,test}` of `settings`, each holding the
        task's marker file, every folder checked before any is written (UsageError: one
        holds files, without `overwrite`); returns {split: folder}."""
        folders = {split: Path(f"{prefix}_{split}") for split in SPLITS}
        for folder in folders.values():
            if not overwrite and folder.exists() and any(folder.iterdir()):
                raise UsageError(
                    f"{folder} exists and is not empty; pass --overwrite to replace it"
                )
        for split, folder in folders.items():
            inputs, targets = self.draw(settings, split)
            folder.mkdir(parents=True, exist_ok=True)
            record = {
                FORMAT_KEY: KINDS["task split"].version,
                "task": self.name,
                "split": split,
                "settings": self.to_dict(settings),
                "num_batches": int(inputs.shape[0]),
                "answers": int(np.count_nonzero(targets)),
                "sha256": digest(inputs, targets),
            }
            atomic_write_text(folder / self.marker, json.dumps(record, indent=2) + "\n")
        return folders

    def read(self, folder: str | os.PathLike) -> tuple[Any, str, np.ndarray, np.ndarray]:
        """(settings, split, inputs, targets int32 [batches, B, L]) of a split folder,
        drawn again and checked against its sha256 (DataError: an invalid file, or
        another draw than the one recorded)."""
        path = Path(folder) / self.marker
        fix = f"write the splits again with partf-build-data --task={self.name} --overwrite"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DataError(f"{path} is not a valid {self.name} split ({e}); {fix}") from None
        # Splits written before the one format key hold "partf-<task>" under it and their
        # version (1) beside: the registry reads that layout as the version it names.
        check_format(record, str(path), "task split")
        task = record.get("task", str(record.get(FORMAT_KEY)).removeprefix("partf-"))
        if task != self.name:
            raise DataError(f"{path} is not a valid {self.name} split (a {task} split); {fix}")
        try:
            settings = self.settings_of(record["settings"])
            split, want = record["split"], record["sha256"]
        except (OSError, ValueError, KeyError, TypeError, UsageError) as e:
            raise DataError(f"{path} is not a valid {self.name} split ({e}); {fix}") from None
        inputs, targets = self.draw(settings, split)
        if digest(inputs, targets) != want:
            raise DataError(
                f"{path}: drawing its examples again gives other data than when it was "
                f"written (another numpy or partf); {fix}"
            )
        return settings, split, inputs, targets


def split_rng(seed: int, split: str) -> np.random.Generator:
    """The random stream of one split of a drawn task."""
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    return np.random.default_rng([seed, SPLITS.index(split)])


def digest(inputs: np.ndarray, targets: np.ndarray) -> str:
    """sha256 of a split's arrays (int32, C order), which its folder records."""
    h = hashlib.sha256()
    for array in (inputs, targets):
        h.update(np.ascontiguousarray(array, np.int32).tobytes())
    return h.hexdigest()
