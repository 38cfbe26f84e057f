"""partf: Pay-Attention-when-Required Transformer-XL and efficient attentions in Keras 3.

Importing partf registers every class a partf `.keras` file names (the model, its layers
and attentions, the schedules and optimizer of a compiled model; `partf.keras_objects`),
so `keras.saving.load_model` needs nothing else:

    >>> import keras, partf
    >>> model = keras.saving.load_model("checkpoints/base/base.keras")

That imports Keras (and with it its backend) on `import partf`.
"""

__version__ = "0.1.0"

from partf import keras_objects  # noqa: E402, F401  (after __version__: it imports partf.*)
