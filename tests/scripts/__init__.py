"""Tests of the scripts under scripts/, which are files to run, not a package."""

from __future__ import annotations

from types import ModuleType

from tests.benchmarks import ROOT, load_file


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py loaded as a module (under <name>_script)."""
    return load_file(ROOT / "scripts" / f"{name}.py", f"{name}_script")
