"""The tasks partf trains on, one module each, found by looking in this package.

Each module `partf.tasks.<name>` (but `base`) holds a module-level `TASK`
(`partf.tasks.base.Task` or `DrawnTask`); a new task is one new module and nothing
else: partf-build-data gains its `--task` choice and flags, partf-train reads its split
folders, scores its accuracy where it has one, and a study plan names it.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil

from partf.errors import UsageError
from partf.tasks.base import DrawnTask, Task

__all__ = ["DrawnTask", "Task", "all_tasks", "drawn_tasks", "get", "of_folder", "plan_task"]


@functools.cache
def all_tasks() -> dict[str, Task]:
    """Every task of this package, by name (the records task first, then by name)."""
    found = []
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            found.append(importlib.import_module(f"{__name__}.{module.name}").TASK)
    found.sort(key=lambda task: (task.drawn, task.name))
    return {task.name: task for task in found}


def records_task() -> Task:
    """The task of record folders (language modelling): partf-build-data's default."""
    return next(task for task in all_tasks().values() if not task.drawn)


def drawn_tasks() -> dict[str, DrawnTask]:
    """The synthetic tasks, by name."""
    return {name: task for name, task in all_tasks().items() if task.drawn}


def get(name: str) -> Task:
    """The task called `name` (UsageError naming the valid ones)."""
    try:
        return all_tasks()[name]
    except KeyError:
        raise UsageError(f"unknown task {name!r}; valid: {', '.join(all_tasks())}") from None


def of_folder(folder: str | os.PathLike) -> DrawnTask | None:
    """The drawn task whose split `folder` is, or None (records, or nothing)."""
    return next((task for task in drawn_tasks().values() if task.owns(folder)), None)


def plan_names() -> list[str]:
    """The values of a plan arm's `task`: each task, and each drawn task mixed into text."""
    mixed = [f"{records_task().name}+{name}" for name in drawn_tasks()]
    return [*all_tasks(), *mixed]


def plan_task(text: str) -> tuple[Task, DrawnTask | None]:
    """(the task a plan arm trains on, the drawn task mixed into its text and scored at
    the end, or None) of the arm's `task` (UsageError: not one of `plan_names`)."""
    if text not in plan_names():
        raise UsageError(f"task must be one of {', '.join(plan_names())}, not {text!r}")
    first, _, mixed = text.partition("+")
    return all_tasks()[first], drawn_tasks()[mixed] if mixed else None
