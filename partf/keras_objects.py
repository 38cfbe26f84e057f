"""Every class a partf `.keras` file can name, made known to Keras by `import partf`.

Keras finds a saved object's class among those registered so far; it never imports a
module to find one, and importing every partf module from `import partf` would make
every partf import pay for Keras and TensorFlow. So `import partf` calls
`register_on_keras_import`: once Keras is imported (now, or right after the program
imports it), each saved class not registered yet, as `partf.declarations` reads them
from the source, gets a stand-in whose `from_config` imports the class's module and
builds the object with the real class. `keras.saving.load_model` then reads any partf
file, whichever of partf and Keras was imported first.

Example:
    >>> import keras, partf
    >>> model = keras.saving.load_model("checkpoints/base/base.keras")
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from partf.declarations import declared
from partf.lazy import ImportHook, hooked

PACKAGE = "partf"


class StandIn:
    """Registered in place of a partf class whose module is not imported yet.

    Keras calls `from_config` on what it finds under a registered name; the stand-in
    imports the real class and lets it build the object.
    """

    def __init__(self, name: str, module: str) -> None:
        self.name = name
        self.module = module

    def from_config(self, config: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        # Importing the class's module registers the class in our place.
        real_class = getattr(importlib.import_module(self.module), self.name)
        return real_class.from_config(config, *args, **kwargs)

    def __repr__(self) -> str:
        return f"StandIn({self.module}.{self.name})"


def register_stand_ins() -> list[str]:
    """Registers a stand-in for every declared saved class Keras (imported) does not know
    yet; returns the names that got one."""
    import keras

    registered = keras.saving.get_custom_objects()
    added = []
    for name, module in declared().saved.items():
        key = f"{PACKAGE}>{name}"
        if key not in registered:
            registered[key] = StandIn(name, module)
            added.append(name)
    return added


def register_on_keras_import() -> None:
    """Registers the stand-ins now if Keras is imported, else right after it is."""
    if sys.modules.get("keras") is not None:
        register_stand_ins()
    elif not hooked("keras"):

        def run(execute: Any, module: Any) -> None:
            execute(module)
            register_stand_ins()

        sys.meta_path.insert(0, ImportHook("keras", run))
