"""Keras registration of every partf layer and model, and the format of partf's files.

Every file partf writes for later reading holds its format under one key (`FORMAT_KEY`),
each kind of file its own (`KINDS`: a new model format does not make the records be built
again). `check_format` refuses a file of another format in one line naming the file, both
formats and the fix; `check_complete` a model file of this format that lacks a setting
(which would otherwise take today's default without a word).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from partf.errors import DataError

T = TypeVar("T")

PACKAGE = "partf"

#: The format of the model files partf writes. A change that a file of the format before
#: could not be read by as it stands (a variable that moves or is renamed, a config field
#: that changes meaning or goes) makes the next format; files of another one are refused.
FORMAT_VERSION = 4

#: The key that holds the format in every file partf writes.
FORMAT_KEY = "format"


@dataclasses.dataclass(frozen=True)
class Kind:
    """A kind of file: the format this partf writes and reads, the fix for an earlier one."""

    version: int
    fix: str


#: Every kind of file partf writes (docs/training.md): model (.keras config, checkpoint,
#: config.json, results.json, export.json), records (metadata.json), cost table, selection,
#: task split (a drawn task's `<task>.json`, partf.tasks).
KINDS: dict[str, Kind] = {
    "model": Kind(
        FORMAT_VERSION,
        "retrain it, or load it with the partf version that wrote it (docs/training.md, "
        f'"Files from before format {FORMAT_VERSION}")',
    ),
    "records": Kind(
        2, "rebuild the records: partf-build-data or ./create_tfrecords.sh --overwrite"
    ),
    "cost table": Kind(3, "delete it, then train again with the same flags and --overwrite"),
    "selection": Kind(1, "train again with the same flags and --overwrite (chooses anew)"),
    "task split": Kind(1, "write the splits again: partf-build-data --task=<the task> --overwrite"),
}


class FormatError(DataError):
    """A saved file of another partf format (the command line exits with status 1)."""


def format_problem(record: Any, what: str, kind: str = "model") -> str | None:
    """Why `record` (a saved file's config or record) cannot be read, in one line, or None
    when it is of `kind`'s format (one of `KINDS`); `what` names the file in the message.

    Example:
        >>> format_problem({"format": FORMAT_VERSION}, "run.keras") is None
        True
        >>> format_problem({}, "run.keras")[:62]
        'run.keras was written by an earlier partf (format none; this p'
    """
    expected = KINDS[kind]
    found = record.get(FORMAT_KEY) if isinstance(record, Mapping) else None
    if isinstance(found, str) and "format_version" in record:
        # The layout before the one key: the kind's name under "format", its version beside.
        found = record["format_version"]
    label, version = "format" if kind == "model" else f"{kind} format", expected.version
    if found == version and not isinstance(found, bool):
        return None
    reads = f"this partf reads {label} {version}"
    if isinstance(found, int) and not isinstance(found, bool) and found > version:
        return f"{what} was written by a newer partf ({label} {found}; {reads}): update partf"
    shown = "none" if found is None else repr(found)
    return f"{what} was written by an earlier partf ({label} {shown}; {reads}): {expected.fix}"


def check_format(record: Any, what: str, kind: str = "model") -> None:
    """Refuses (FormatError) a saved record of another format than `kind`'s, in
    `format_problem`'s line."""
    problem = format_problem(record, what, kind)
    if problem is not None:
        raise FormatError(problem)


def check_complete(values: Mapping[str, Any], cls: type, what: str) -> None:
    """Refuses a saved record of this format (`what`: the file, for the message) that lacks
    a field of dataclass `cls`, or an argument of its constructor (less `**kwargs`): the
    files partf writes hold them all, and a missing one would take today's default.
    FormatError: one line naming `what`, the missing names and this partf's defaults."""
    if dataclasses.is_dataclass(cls):
        expected = {
            f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(cls)
        }
    else:
        parameters = inspect.signature(cls).parameters.values()
        expected = {p.name: p.default for p in parameters if p.kind is not p.VAR_KEYWORD}
    missing = [name for name in expected if name not in values]
    if not missing:
        return
    unset = (dataclasses.MISSING, inspect.Parameter.empty)
    known = {name: expected[name] for name in missing if expected[name] not in unset}
    hint = f" (this partf's defaults: {json.dumps(known, default=str)})" if known else ""
    raise FormatError(
        f"{what} lacks {', '.join(missing)}, which every format {FORMAT_VERSION} file holds: "
        f"add them to it with the values its run used{hint}, or use the partf that wrote it"
    )


def register(cls: T) -> T:
    """Registers `cls` as Keras-serializable under the `partf` package, so a saved
    `.keras` file names it `partf>ClassName` and loads without `custom_objects`."""
    import keras

    return keras.saving.register_keras_serializable(package=PACKAGE)(cls)
