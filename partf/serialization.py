"""Keras registration of every partf layer and model, and the format of partf's files.

Every file partf writes for later reading says which format it is in (`FORMAT_KEY`): a
`.keras` model's config, each checkpoint's record, a run's config.json and
results.json. `check_format` refuses a file of another format in one line, and
`check_complete` one of this format that lacks a setting (which would otherwise take
today's default without a word).
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

#: The format of the files partf writes. A change that a file of the format before could
#: not be read by as it stands (a variable that moves or is renamed, a config field that
#: changes meaning or goes) makes the next format; files of another one are refused.
FORMAT_VERSION = 4

#: The key that holds the format in a saved record.
FORMAT_KEY = "format"


class FormatError(DataError):
    """A saved file of another partf format (the command line exits with status 1)."""


def format_problem(record: Any, what: str) -> str | None:
    """Why `record` (a saved file's config or record) cannot be read, in one line, or None
    when it is of `FORMAT_VERSION`.

    Args:
        record: the file's record, as read (a dict holding `FORMAT_KEY`).
        what: the file, for the message ("checkpoint ckpt-00000012.npz").

    Example:
        >>> format_problem({"format": FORMAT_VERSION}, "run.keras") is None
        True
        >>> format_problem({}, "run.keras")[:62]
        'run.keras was written by an earlier partf (format none; this p'
    """
    found = record.get(FORMAT_KEY) if isinstance(record, Mapping) else None
    if found == FORMAT_VERSION and not isinstance(found, bool):
        return None
    reads = f"this partf reads format {FORMAT_VERSION}"
    if isinstance(found, int) and not isinstance(found, bool) and found > FORMAT_VERSION:
        return f"{what} was written by a newer partf (format {found}; {reads}): update partf"
    shown = "none" if found is None else repr(found)
    return (
        f"{what} was written by an earlier partf (format {shown}; {reads}): retrain it, or "
        'load it with the partf version that wrote it (docs/training.md, "Files from '
        f'before format {FORMAT_VERSION}")'
    )


def check_format(record: Any, what: str) -> None:
    """Refuses a saved record of another format.

    Raises:
        FormatError: `format_problem`'s line.
    """
    problem = format_problem(record, what)
    if problem is not None:
        raise FormatError(problem)


def check_complete(values: Mapping[str, Any], cls: type, what: str) -> None:
    """Refuses a saved record of this format (`what`: the file, for the message) that lacks
    a field of dataclass `cls`, or an argument of its constructor (less `**kwargs`): the
    files partf writes hold them all, and a missing one would take today's default.

    Raises:
        FormatError: one line naming `what`, the missing names and this partf's defaults.
    """
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
    """Registers `cls` as Keras-serializable under the `partf` package.

    Every layer and model in partf uses this, so a saved `.keras` file names
    its classes as `partf>ClassName` and loads without `custom_objects`.
    """
    import keras

    return keras.saving.register_keras_serializable(package=PACKAGE)(cls)
