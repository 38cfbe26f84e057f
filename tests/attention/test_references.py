"""Every mechanism is checked against a reference that shares no code with it.

A reference that calls the layer's own helpers (its projection nets, its chunk
weights, its masked softmax) would agree with a wrong layer. The references live in
tests/attention/references.py, which may import only numpy and the standard library,
and each mechanism's test module must compare against its function there.
"""

from __future__ import annotations

import ast
from pathlib import Path

from partf.attention import attention_names, get_attention_class
from tests.attention import references

HERE = Path(__file__).parent
#: What references.py may import: nothing that could reach a layer's code.
ALLOWED_IMPORTS = {"__future__", "math", "typing", "numpy"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def partf_reference_imports(path: Path) -> list[str]:
    """Names containing "reference" that a test module imports from partf."""
    tree = ast.parse(path.read_text())
    return [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("partf")
        for alias in node.names
        if "reference" in alias.name
    ]


def test_references_import_nothing_from_partf():
    modules = imported_modules(HERE / "references.py")
    assert {m.split(".")[0] for m in modules} <= ALLOWED_IMPORTS, modules


def test_no_mechanism_is_checked_against_a_reference_that_shares_its_code():
    """Lists the mechanisms without an independent reference, or whose test module
    does not use it, or imports a reference from partf: expected none."""
    sharing, checked = [], []
    for name in attention_names():
        owner = get_attention_class(name).__module__
        if not owner.startswith("partf."):
            continue  # a mechanism a test registered for itself
        module = owner.rsplit(".", 1)[-1]
        checked.append(name)
        test_file = HERE / f"test_{module}.py"
        reference = references.REFERENCES.get(name)
        if (
            reference is None
            or not test_file.is_file()
            or f"references.{reference.__name__}" not in test_file.read_text()
            or partf_reference_imports(test_file)
        ):
            sharing.append(name)
    assert sharing == []
    assert set(checked) == set(references.REFERENCES), checked
    # The shared chunk-wise kernel too.
    kernel_tests = HERE / "test_chunked.py"
    assert "references.linear_kernel" in kernel_tests.read_text()
    assert partf_reference_imports(kernel_tests) == []
