"""Tests of the scripts under benchmarks/, which are files to run, not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_file(path: Path, name: str) -> ModuleType:
    """The Python file at `path` loaded as a module named `name`, for its functions."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py loaded as a module (under <name>_benchmark)."""
    return load_file(ROOT / "benchmarks" / f"{name}.py", f"{name}_benchmark")
