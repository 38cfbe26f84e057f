"""No module of partf/ grows past 500 lines: a longer one holds more than one concept,
and is split along them (as partf/models/loss.py was split out of
par_transformer_xl.py). The limit is a warning sign, not a target: a class that reads top
to bottom beats mixins that exist only to stay under it (issue 38)."""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "partf"
MAX_LINES = 500


def test_no_module_exceeds_the_line_limit():
    sizes = {
        str(path.relative_to(PACKAGE_ROOT.parent)): len(
            path.read_text(encoding="utf-8").splitlines()
        )
        for path in sorted(PACKAGE_ROOT.rglob("*.py"))
    }
    assert sizes, "no modules found under partf/"
    too_long = {path: lines for path, lines in sizes.items() if lines > MAX_LINES}
    assert not too_long, (
        f"modules over {MAX_LINES} lines (split each along its concepts): {too_long}"
    )
