"""The registry finds every task module of partf/tasks, and no code outside a task's own
module tells tasks apart by name (issue 78): a new task is one module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from partf import tasks
from partf.errors import UsageError

PARTF = Path(tasks.__file__).resolve().parents[1]
#: Comparisons with a task's name that are about something else: (file, source).
ALLOWED = {
    # [data]'s `text` key of a plan (a folder of text), not the task.
    ("partf/study/plan.py", '"text" in table'),
}


def test_every_module_of_the_package_is_a_task():
    modules = {p.stem for p in Path(tasks.__file__).parent.glob("*.py")} - {"__init__", "base"}
    assert set(tasks.all_tasks()) == modules
    assert not tasks.records_task().drawn and list(tasks.all_tasks())[0] == "text"
    assert all(task.scores_accuracy for task in tasks.drawn_tasks().values())


def test_plan_names_are_each_task_and_each_drawn_task_mixed_into_text():
    assert tasks.plan_task("mqar") == (tasks.get("mqar"), None)
    assert tasks.plan_task("text+mqar") == (tasks.records_task(), tasks.get("mqar"))
    for bad in ("vision", "mqar+text", "text+text", "text+"):
        with pytest.raises(UsageError, match="task must be one of text, "):
            tasks.plan_task(bad)
    with pytest.raises(UsageError, match="unknown task 'vision'; valid: text, "):
        tasks.get("vision")


def _names(node: ast.AST) -> set[str]:
    """The string constants of a comparison operand (a tuple, list or set of them too)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def test_no_module_outside_a_task_compares_a_task_by_name():
    """No `== "mqar"`, `in ("text", "mqar")` or the like outside partf/tasks/<name>.py,
    and no drawn task's name (or `text+<name>`) as a string anywhere else: what differs
    between tasks is asked of the task (partf.tasks.base)."""
    names = set(tasks.all_tasks())
    drawn = set(tasks.drawn_tasks()) | {f"text+{n}" for n in tasks.drawn_tasks()}
    found = []
    for path in sorted(PARTF.rglob("*.py")):
        if path.parent.name == "tasks" and path.stem in names:
            continue  # a task's own module
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                hits = set().union(*(_names(o) for o in operands)) & names
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                hits = {node.value} & drawn
            else:
                continue
            where = str(path.relative_to(PARTF.parent))
            if hits and (where, ast.get_source_segment(source, node)) not in ALLOWED:
                found.append(f"{where}:{node.lineno}: {sorted(hits)}")
    assert not found, "\n".join(found)
