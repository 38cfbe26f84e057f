"""Attention mechanisms behind one interface, looked up by name.

from partf.attention import create_attention
layer = create_attention("performer", d_model=128, num_heads=4, num_features=64)
y, state = layer(x, state=state)
"""

from partf.attention.base import Attention, State
from partf.attention.registry import (
    attention_names,
    create_attention,
    get_attention_class,
    register_attention,
)

__all__ = [
    "Attention",
    "State",
    "attention_names",
    "create_attention",
    "get_attention_class",
    "register_attention",
]
