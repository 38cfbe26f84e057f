"""Package namespaces whose names are imported on first use (PEP 562).

`partf.data` and `partf.training` re-export names from modules that import TensorFlow
(the records reader, the trainer). Importing those modules only when one of their names
is used lets the model, the optimizer and the configurations load where TensorFlow is
not installed, such as a JAX-only GPU machine.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, where: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, given {name: submodule it lives in}.

    Names equal to their submodule's name are imported at once (keep such modules
    free of TensorFlow).

    Example (in a package's __init__.py):
        >>> __getattr__, __dir__ = lazy_exports(__name__, {"train": "trainer"})
    """
    namespace = importlib.import_module(package).__dict__
    for name, module in where.items():
        # A name shared with its own module (partf.data.download) must be bound now:
        # importing the submodule later sets the package attribute to the module.
        if name == module:
            namespace[name] = getattr(importlib.import_module(f"{package}.{module}"), name)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


class ImportHook(importlib.abc.MetaPathFinder):
    """Runs code around the first import of one module, without importing it now.

    Put on `sys.meta_path`, it finds nothing itself: when the program first imports
    `name`, it removes itself, hands back the spec the other finders give, and has the
    module executed by `run(execute, module)`, where `execute(module)` is the loader's own
    step (so `run` can wrap it, or follow it with more work). Used to register partf's
    saved classes right after Keras loads and to quiet TensorFlow while it loads.
    """

    def __init__(self, name: str, run: Callable[[Callable[[Any], None], Any], None]) -> None:
        self.name = name
        self.run = run

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # once; and the other finders below find it
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute, run = loader.exec_module, self.run
        # This loader instance loads `name` only.
        loader.exec_module = lambda module: run(execute, module)
        return spec


def hooked(name: str) -> bool:
    """Whether an `ImportHook` for `name` waits on `sys.meta_path`."""
    return any(isinstance(f, ImportHook) and f.name == name for f in sys.meta_path)
