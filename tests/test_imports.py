"""The package map of docs/development.md, enforced: which partf package may import which.

Every `import partf...` and `from partf... import` in partf/ (at module level or inside a
function) is read from the source. A package may import itself, the foundation modules,
and the packages listed for it; anything else is an upward import or the start of a
cycle, and fails here with the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "partf"

#: Modules with no partf dependencies but each other: anything may import them.
FOUNDATION = {
    "errors",
    "settings",
    "serialization",
    "random",
    "lazy",
    "console",
    "declarations",
    "atomic",
    "run_folder",
}

#: package -> the packages (besides itself and the foundation) it may import.
ALLOWED = {
    "errors": set(),
    "settings": set(),
    "serialization": set(),
    "lazy": set(),
    "console": set(),
    "random": set(),
    "declarations": set(),
    "atomic": set(),
    "run_folder": set(),
    "data": set(),
    "attention": set(),
    "cutoffs": set(),
    # One module per task: its settings, splits and scoring (the records task builds
    # with partf.data, on demand).
    "tasks": {"data"},
    "layers": {"attention"},
    "models": {"attention", "layers"},
    "generation": {"attention", "layers", "models", "data"},
    "training": {"attention", "layers", "models", "data", "tasks"},
    "export": {"attention", "layers", "models", "data", "generation"},
    # Runs partf-train as processes and reads what they wrote: no model code.
    "study": {"tasks"},
    "cli": {
        "attention",
        "layers",
        "models",
        "data",
        "training",
        "generation",
        "export",
        "cutoffs",
        "study",
        "tasks",
    },
    "train": {"cli"},
    # Makes every class a .keras file names known to Keras; it imports their modules by
    # name, on demand (partf/keras_objects.py, the names from partf.declarations).
    "keras_objects": set(),
    "__init__": {"keras_objects"},
}


def _unit(path: Path) -> str:
    """The package (or top-level module) a file of partf/ belongs to."""
    parts = path.relative_to(PACKAGE_ROOT).parts
    return parts[0] if len(parts) > 1 else Path(parts[0]).stem


def _imported_units(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, partf package) of every import of a partf module in `tree`."""
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "partf":  # `from partf import models`
                names = [f"partf.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "partf" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def _all_imports() -> list[tuple[str, int, str, str]]:
    rows = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        unit = _unit(path)
        for line, target in _imported_units(tree):
            rows.append((str(path.relative_to(PACKAGE_ROOT.parent)), line, unit, target))
    return rows


def test_every_package_is_in_the_map():
    units = {_unit(path) for path in PACKAGE_ROOT.rglob("*.py")}
    missing = sorted(units - set(ALLOWED))
    assert not missing, f"add {missing} to ALLOWED and docs/development.md"


def test_no_upward_import():
    bad = [
        f"{file}:{line}: {unit} imports partf.{target}"
        for file, line, unit, target in _all_imports()
        if target != unit and target not in FOUNDATION and target not in ALLOWED[unit]
    ]
    assert not bad, "imports against the package map:\n" + "\n".join(bad)


def test_foundation_modules_import_only_each_other():
    bad = [
        f"{file}:{line}: {unit} imports partf.{target}"
        for file, line, unit, target in _all_imports()
        if unit in FOUNDATION and target not in FOUNDATION
    ]
    assert not bad, "\n".join(bad)


def test_the_map_has_no_cycle():
    """The allowed graph itself is acyclic, so obeying it rules out package cycles."""
    graph = {unit: ALLOWED[unit] | (FOUNDATION - {unit}) for unit in ALLOWED}
    graph.update({unit: set() for unit in FOUNDATION})  # foundation imports stay flat
    state: dict[str, int] = {}

    def visit(unit: str, trail: list[str]) -> None:
        if state.get(unit) == 1:
            pytest.fail("cycle: " + " -> ".join([*trail, unit]))
        if state.get(unit) == 2:
            return
        state[unit] = 1
        for target in sorted(graph.get(unit, ())):
            visit(target, [*trail, unit])
        state[unit] = 2

    for unit in sorted(graph):
        visit(unit, [])


def test_the_checker_sees_imports_inside_functions():
    tree = ast.parse("def f():\n    from partf.cli.train import main\nimport partf.models.config\n")
    assert sorted(_imported_units(tree)) == [(2, "cli"), (3, "models")]


def test_only_the_trainer_imports_the_callbacks_it_drives():
    """The run's state is the trainer's (partf.training.run_state), so no other module of
    partf/training/ reaches up into partf.training.callbacks; the trainer builds them."""
    bad = []
    for path in sorted((PACKAGE_ROOT / "training").rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT / "training")
        if relative.parts[0] == "callbacks" or relative == Path("trainer.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [
                f"training/{relative}:{node.lineno}: {name}"
                for name in names
                if name.startswith("partf.training.callbacks")
            ]
    assert not bad, "\n".join(bad)
