"""Every class a partf `.keras` file can name, registered with Keras.

Keras loads a saved object by looking its registered name ("partf>PARTransformerXL")
up among the classes registered so far; it never imports a module to find one. So the
modules defining partf's serializable classes must have been imported before
`keras.saving.load_model`: this module imports all of them, and `import partf` imports
this module. That covers the model and its layers, every attention mechanism (they
register when their module is imported), and, for a model saved compiled by
partf-train, its learning-rate schedules and optimizer.

None of these modules imports TensorFlow itself, so the classes register on any Keras
backend (a JAX-only machine too).

Example:
    >>> import keras, partf
    >>> model = keras.saving.load_model("checkpoints/base/base.keras")
"""

from __future__ import annotations

import partf.models  # noqa: F401  (the model, its layers and config)
import partf.training.lr_schedules  # noqa: F401  (schedules of a compiled model)
import partf.training.optimizer  # noqa: F401  (ArchSplitOptimizer)
from partf.attention import attention_names, get_attention_class


def register_all() -> list[str]:
    """Imports every attention mechanism's module, registering its class.

    Returns:
        The registered attention names.
    """
    names = attention_names()
    for name in names:
        get_attention_class(name)
    return names


register_all()
