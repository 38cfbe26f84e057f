"""partf: Pay-Attention-when-Required Transformer-XL and efficient attentions in Keras 3.

After `import partf`, `keras.saving.load_model` reads any `.keras` file partf saved (the
model, its layers and attentions, the schedules and optimizer of a compiled model),
without importing Keras here (see `partf.keras_objects`):

    >>> import keras, partf
    >>> model = keras.saving.load_model("checkpoints/base/base.keras")
"""

__version__ = "0.1.0"

from partf.keras_objects import register_on_keras_import  # noqa: E402

register_on_keras_import()
