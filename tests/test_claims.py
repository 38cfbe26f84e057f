"""docs/claims.md names, for every claim, the tests that check it: each named test file
and test function must exist, so a renamed or deleted test cannot leave a claim
pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ROOT / "docs" / "claims.md"

# `file.py::test_name`, `::test_name` (same file as the reference before it in the
# cell) or a bare `file.py`; paths are relative to tests/.
REFERENCE = re.compile(r"`((?:[\w/]+\.py)?)(?:::(\w+))?[^`]*`")


def resolve(path: str) -> Path:
    """A file named in the claims: relative to the repository when it starts with a
    top-level folder, else relative to tests/."""
    if path.split("/")[0] in {"tests", "benchmarks", "partf"}:
        return ROOT / path
    return ROOT / "tests" / path


def referenced_tests() -> list[tuple[Path, str | None, str]]:
    """(file, test name or None, the table row) for every reference in the claims."""
    found = []
    for line in CLAIMS.read_text().splitlines():
        if not line.startswith("|"):
            continue
        checked_by = line.rstrip("|").split("|")[-1]
        current = None
        for match in REFERENCE.finditer(checked_by):
            path, name = match.group(1), match.group(2)
            if path and ("/" in path or path.startswith("test_")):
                current = resolve(path)
            elif path:  # a file of the original project, named for comparison
                current = None
                continue
            if current and (path or name):
                found.append((current, name, line))
    return found


def test_the_claims_name_tests():
    assert len(referenced_tests()) > 100


def test_every_named_test_exists():
    missing = []
    for path, name, line in referenced_tests():
        if not path.is_file():
            missing.append(f"{path.relative_to(ROOT)} (in: {line[:60]})")
        elif name and not re.search(rf"^\s*(async )?def {name}\(", path.read_text(), re.M):
            missing.append(f"{path.relative_to(ROOT)}::{name}")
    assert not missing, "docs/claims.md names tests that do not exist: " + ", ".join(missing)
