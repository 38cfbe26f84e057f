"""`setting`: a dataclass field that carries its own command-line help.

The configuration dataclasses (`partf.models.config.ModelConfig` and
`partf.training.config.TrainConfig`) declare each setting once, with its default and its
help text, and `partf.cli.flags` turns every such field into a flag of the same name:

    d_model: int = setting(128, "embedding and hidden width")

This module imports nothing from partf, so every package may use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

#: Keys of a setting's field metadata (read by `partf.cli.flags`).
HELP, GROUP, CHOICES, METAVAR = "help", "group", "choices", "metavar"


def setting(
    default: Any,
    help: str,
    *,
    group: str | None = None,
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
) -> Any:
    """A dataclass field with a `default` (immutable: a tuple, not a list) and the metadata
    of its command-line flag: `help` (`--help` adds the default), the `--help` section
    `group`, the only values it takes `choices` (checked while parsing and by
    `unknown_choice`), and `metavar` (default: the field name in capitals)."""
    metadata: dict[str, Any] = {HELP: help}
    if group is not None:
        metadata[GROUP] = group
    if choices is not None:
        metadata[CHOICES] = tuple(choices)
    if metavar is not None:
        metadata[METAVAR] = metavar
    return dataclasses.field(default=default, metadata=metadata)


def unknown_choice(config: Any) -> tuple[str, Any, tuple[str, ...]] | None:
    """(name, value, choices) of the first setting of the dataclass `config` whose value is
    not one of its `choices`; None when every such setting holds one of them."""
    for field in dataclasses.fields(config):
        choices = field.metadata.get(CHOICES)
        if choices is not None and getattr(config, field.name) not in choices:
            return field.name, getattr(config, field.name), choices
    return None
