"""Writes partf/cli/flag_table.py from the settings it copies.

    python -m partf.cli.make_flag_table

partf-train builds its parser from that table, so that `--help` and a mistyped flag
answer without importing the configurations (and with them Keras and TensorFlow). The
table is written from `TrainConfig` and `ModelConfig` (`partf.cli.flags.settings_of`)
and, for each mechanism the source declares (`partf.declarations`), from its class's
`options` (its `option_help` and constructor defaults); run this after changing any of
them, or adding a mechanism. tests/cli/test_quiet.py fails while the
table differs from them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from partf.cli import exits
from partf.cli.flags import settings_of

TABLE = Path(__file__).with_name("flag_table.py")
LINE_LENGTH = 100  # ruff.toml's

HEADER = '''"""partf-train's settings and the attention mechanisms' options, as plain values.

Written by `python -m partf.cli.make_flag_table` from `TrainConfig`, `ModelConfig` and
the attention classes the source declares (partf.declarations); do not edit by hand.
partf-train builds its parser from these, so `--help` and flag errors need neither Keras
nor TensorFlow; tests/cli/test_quiet.py checks that they still equal their sources.
"""

from typing import Any

from partf.cli.flags import Setting

'''


def mechanism_options() -> dict[str, dict[str, tuple[Any, str]]]:
    """Mechanism name -> its `options` (option -> (default, help)), for every mechanism
    declared in the source (imports them all)."""
    from partf.attention import get_attention_class
    from partf.attention.registry import builtin_attention_names

    return {name: dict(get_attention_class(name).options) for name in builtin_attention_names()}


def current() -> dict[str, Any]:
    """The table's values as the sources give them now (imports TensorFlow)."""
    from partf.models.config import ModelConfig
    from partf.training.config import TrainConfig

    return {
        "TRAIN_SETTINGS": settings_of(TrainConfig),
        "MODEL_SETTINGS": settings_of(ModelConfig),
        "MECHANISM_OPTIONS": mechanism_options(),
    }


def _literal(value: Any, indent: int = 0) -> str:
    """`value` as Python source; a string too long for one line at `indent` comes in
    pieces split at spaces, joined implicitly (ruff then gives each its own line)."""
    if isinstance(value, str):
        room = LINE_LENGTH - indent - 4  # quotes, a comma and a margin
        pieces, piece = [], ""
        for word in re.findall(r"\S+\s*|\s+", value):
            if piece and len(json.dumps(piece + word, ensure_ascii=False)) > room:
                pieces.append(piece)
                piece = ""
            piece += word
        return " ".join(json.dumps(item, ensure_ascii=False) for item in [*pieces, piece])
    if isinstance(value, tuple):
        items = ", ".join(_literal(item) for item in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if (
        value is None
        or isinstance(value, bool | int)
        or (isinstance(value, float) and value == value and abs(value) != float("inf"))
    ):
        return repr(value)
    raise TypeError(f"a table value must be a plain literal, got {value!r}")


def source(tables: dict[str, Any]) -> str:
    """The text of flag_table.py holding `tables` (as `current` gives them), before
    `ruff format` lays it out."""
    lines = [HEADER.rstrip("\n"), ""]
    for name in ("TRAIN_SETTINGS", "MODEL_SETTINGS"):
        lines.append(f"{name}: tuple[Setting, ...] = (")
        for setting in tables[name]:
            given = [_literal(value, indent=8) for value in setting[:4]]
            given += [
                f"{field}={_literal(getattr(setting, field))}"
                for field in ("group", "choices", "metavar")
                if getattr(setting, field) is not None
            ]
            lines.append(f"    Setting({', '.join(given)}),")
        lines += [")", ""]
    lines.append("MECHANISM_OPTIONS: dict[str, dict[str, tuple[Any, str]]] = {")
    for mechanism, options in tables["MECHANISM_OPTIONS"].items():
        lines.append(f"    {_literal(mechanism)}: {{")
        for option, (default, help_text) in options.items():
            pair = f"{_literal(default)}, {_literal(help_text, indent=12)}"
            lines.append(f"        {_literal(option)}: ({pair}),")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Writes the table, then lays it out with `ruff format` (from the test extras)."""
    exits.quiet_tensorflow(verbose=False)
    TABLE.write_text(source(current()), encoding="utf-8")
    try:
        subprocess.run([sys.executable, "-m", "ruff", "format", str(TABLE)], check=True)
    except (OSError, subprocess.CalledProcessError):
        print(f"wrote {TABLE}; now run `ruff format` on it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
