"""No partf module imports itself through others: the module import graph has no cycle.

Every import of a partf module is read from the source, wherever it stands: at module
level, inside a function (a lazy import still runs the other module) and under
`if TYPE_CHECKING:` (a circle the type checker follows is a circle in the design). An
import `from package import name` counts as an import of the package's `__init__`, and of
`package.name` when that is a module. Importing a module also runs its packages'
`__init__` files first; that edge is Python's own and is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "partf"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """The partf modules that the module `name` (source at `path`) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, `level - 1` packages up
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    """partf module -> the partf modules it imports."""
    paths = {_module_name(path): path for path in PACKAGE_ROOT.rglob("*.py")}
    return {name: _imports(name, path, set(paths)) for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for target in sorted(graph[node]):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done and (cycle := visit(target)):
                return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done and (cycle := visit(node)):
            return cycle
    return None


def test_the_finder_sees_a_cycle_and_its_absence():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_reads_the_models_imports():
    graph = import_graph()
    assert "partf.models.config" in graph["partf.models.par_transformer_xl"]
    assert "partf.models.search_interface" in graph["partf.models.encoder"]
    assert "partf.models.par_transformer_xl" in graph["partf.models"]


def test_the_models_import_no_cycle():
    graph = import_graph()
    models = {name: targets for name, targets in graph.items() if name.startswith("partf.models")}
    assert len(models) > 5
    cycle = find_cycle(
        {name: {t for t in targets if t in models} for name, targets in models.items()}
    )
    assert cycle is None, f"partf.models imports in a circle: {' -> '.join(cycle)}"


def test_no_partf_module_imports_in_a_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, f"partf imports in a circle: {' -> '.join(cycle)}"
