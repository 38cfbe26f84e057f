"""partf: Pay-Attention-when-Required Transformer-XL and efficient attentions in Keras 3."""

__version__ = "0.1.0"
