"""Command-line flags generated from configuration dataclasses.

Every field declared with `partf.settings.setting` becomes a flag of the same name,
spelled after its type in the absl style of the original project: a `bool` takes `--x`,
`--x=VALUE` and `--nox`; a `tuple[...]` is repeatable, each occurrence one or several
comma-separated values, an empty value clearing it (`--cutoffs=`); anything else takes
one value. `add_flags` adds them to a parser and `flag_values` reads them back; both also
take plain `Setting` records (`partf.cli.settings_source`), so partf-train builds its
parser without importing Keras.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from partf.settings import CHOICES, GROUP, HELP, METAVAR

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


def parse_bool(text: str) -> bool:
    """absl-style booleans: true/false, 1/0, yes/no, on/off (any case)."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def int_list(text: str) -> list[int]:
    """'250' or '250,2500' -> ints; '' -> [] (used to clear a list)."""
    try:
        return [int(part) for part in name_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers, got {text!r}") from None


def name_list(text: str) -> list[str]:
    """'a,b' or 'a b' -> ['a', 'b']; '' -> [] (used to clear a list)."""
    return text.replace(",", " ").split()


class ExtendAction(argparse.Action):
    """Repeatable list flag; each occurrence may hold one or several comma-separated values.

    The first occurrence replaces the default, as absl's multi-flags do, and later ones
    add to it. An empty value (`--cutoffs=`) clears the list, so `--cutoffs=` alone means
    "none".
    """

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        if current is None or current is self.default:
            current = []
        setattr(namespace, self.dest, [*current, *values] if values else [])


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" only where the flag has a default of its own; flags that stay
    unset unless given name their dataclass default in brackets instead."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is argparse.SUPPRESS:
            return action.help or ""
        return super()._get_help_string(action)


def add_bool_flag(container: Any, name: str, help: str, default: bool | None = None) -> None:
    """Adds `--name`, `--name=VALUE` and `--noname` (left out of `--help`), as absl
    accepts them, to a parser or argument group."""
    container.add_argument(
        f"--{name}",
        nargs="?",
        const=True,
        default=default,
        type=parse_bool,
        metavar="BOOL",
        help=help,
    )
    container.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def flag_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of dataclass `cls` that are flags (declared with `setting`), in order."""
    return [field for field in dataclasses.fields(cls) if HELP in field.metadata]


def show_default(value: Any) -> str:
    """A default as `--help` shows it: false, 250,2500, relative."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return ",".join(str(item) for item in value)
    return str(value)


class Setting(NamedTuple):
    """One flag field of a configuration dataclass as plain values: all a parser needs.

    `kind` is how the flag is spelled: "bool", "int", "float", "str", or a list of
    "ints" or "names".
    """

    name: str
    kind: str
    default: Any
    help: str
    group: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None


#: Setting.kind -> how a value given on the command line is converted (None: kept as text).
CONVERTERS: dict[str, Callable[[str], Any] | None] = {
    "bool": parse_bool,
    "int": int,
    "float": float,
    "str": None,
    "ints": int_list,
    "names": name_list,
}


def _kind(annotation: Any) -> str:
    """The `Setting.kind` of a field's type."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        # `X | None`: None only means "unset", which the flag expresses by being absent.
        inner = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(inner) == 1:
            annotation = inner[0]
    if typing.get_origin(annotation) is tuple:
        element = typing.get_args(annotation)[0]
        if element in (int, str):
            return "ints" if element is int else "names"
    kinds = {bool: "bool", int: "int", float: "float", str: "str"}
    if annotation in kinds:
        return kinds[annotation]
    raise TypeError(f"no flag spelling for a setting of type {annotation!r}")


def settings_of(cls: type) -> tuple[Setting, ...]:
    """The settings of dataclass `cls` (its fields declared with `setting`), in order;
    TypeError for a setting of a type no flag can spell (a dict, say)."""
    hints = typing.get_type_hints(cls)
    return tuple(
        Setting(
            name=field.name,
            kind=_kind(hints[field.name]),
            default=field.default,
            help=field.metadata[HELP],
            group=field.metadata.get(GROUP),
            choices=field.metadata.get(CHOICES),
            metavar=field.metadata.get(METAVAR),
        )
        for field in flag_fields(cls)
    )


def _settings(source: type | Sequence[Setting]) -> Sequence[Setting]:
    return settings_of(source) if isinstance(source, type) else source


def add_flags(
    container: Any,
    source: type | Sequence[Setting],
    *,
    group: str | None = None,
    unset: bool = False,
    defaults: Mapping[str, tuple[Any, str]] | None = None,
) -> list[str]:
    """Adds a flag for each setting of a dataclass (or its `settings_of`) to a parser or
    argument group, and returns the field names that became flags.

    Args:
        group: add only the settings of this `group` (None: all of them).
        unset: leave the flags at None unless given, so that the dataclass's default
            applies later (the help shows it in brackets); else the flag's default is
            the field's, shown as "(default: X)".
        defaults: field name -> (flag default, how `--help` describes it), where the
            command line's default differs from the field's."""
    defaults = defaults or {}
    added = []
    for item in _settings(source):
        if group is not None and item.group != group:
            continue
        # argparse formats help with %-style placeholders; a literal % must be doubled.
        help_text = item.help.replace("%", "%%")
        default = item.default
        if item.name in defaults:
            default, description = defaults[item.name]
            help_text += f" (default: {description})"
        elif unset:
            if default is not None:
                help_text += f" [{show_default(default)}]"
            default = None
        if item.kind == "bool":
            add_bool_flag(container, item.name, help_text, default)
        else:
            extra = {"choices": item.choices, "metavar": item.metavar}
            extra = {key: value for key, value in extra.items() if value is not None}
            if item.kind in ("ints", "names"):
                extra["action"] = ExtendAction
            container.add_argument(
                f"--{item.name}",
                type=CONVERTERS[item.kind],
                default=default,
                help=help_text,
                **extra,
            )
        added.append(item.name)
    return added


def flag_values(
    args: argparse.Namespace, source: type | Sequence[Setting], *, unset: bool = False
) -> dict[str, Any]:
    """Field name -> value (lists as tuples), ready for `cls(**values)`, of the flags
    `add_flags` added, as parsed into `args`; `unset` leaves out those not given."""
    values = {}
    for item in _settings(source):
        value = getattr(args, item.name)
        if unset and value is None:
            continue
        values[item.name] = tuple(value) if isinstance(value, list) else value
    return values
