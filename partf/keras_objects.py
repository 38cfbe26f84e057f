"""Every class a partf `.keras` file can name, made known to Keras by `import partf`.

Keras loads a saved object by looking its registered name ("partf>PARTransformerXL")
up among the classes registered so far; it never imports a module to find one. A
class registers when its module is imported, so loading a file after `import partf`
alone would fail. Importing those modules from `import partf` would make every partf
import pay for Keras and TensorFlow (seconds, and their start-up messages before the
one-line errors of partf-build-data and the scripts). Instead, `import partf` calls
`register_on_keras_import`:

* once Keras is imported (now, if it already is; otherwise right after the program
  imports it), each saved class not registered yet gets a stand-in: the classes
  decorated with `partf.serialization.register` or `register_attention`, found by
  reading the source (`partf.declarations`), so no list repeats them;
* a stand-in's `from_config` imports the class's module (which registers the class
  itself, replacing the stand-in) and builds the object with the real class.

So `import partf` costs nothing, and `keras.saving.load_model` reads any partf file,
compiled or not, whichever of partf and Keras was imported first.

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

    def real_class(self) -> type:
        """The class itself (importing its module registers it in our place)."""
        return getattr(importlib.import_module(self.module), self.name)

    def from_config(self, config: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return self.real_class().from_config(config, *args, **kwargs)

    def __repr__(self) -> str:
        return f"StandIn({self.module}.{self.name})"


def register_stand_ins() -> list[str]:
    """Registers a stand-in for every declared saved class Keras does not know yet.

    Needs Keras imported. Returns the names that got one.
    """
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
