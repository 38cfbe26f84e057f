"""Package namespaces whose names are imported on first use (PEP 562).

`partf.data` and `partf.training` re-export names from modules that import TensorFlow
(the records reader, the trainer). Importing those modules only when one of their names
is used lets the model, the optimizer and the configurations load where TensorFlow is
not installed, such as a JAX-only GPU machine.
"""

from __future__ import annotations

import importlib
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
