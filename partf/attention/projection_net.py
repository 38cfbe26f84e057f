"""ProjectionNet: the small learned map EVA and LARA use for their adaptive proposals.

Both mechanisms draw their importance-sampling proposals from projections of the queries
and keys (Zheng et al. 2022, 2023); the authors' code uses one linear layer, optionally
followed by a layer norm, shared by the heads.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


class ProjectionNet:
    """f(x) = LayerNorm(Dense(x)) over the head width (no norm without `norm`), built
    inside a layer's `build`. The sub-layers are attributes of the owning layer (so Keras
    tracks and saves them); this only groups them."""

    def __init__(self, owner: keras.layers.Layer, dim: int, name: str, norm: bool = True) -> None:
        self.dense = keras.layers.Dense(dim, dtype=owner.dtype_policy, name=f"{name}_dense")
        self.dense.build((None, dim))
        setattr(owner, f"{name}_dense", self.dense)
        self.norm = None
        if norm:
            self.norm = keras.layers.LayerNormalization(
                epsilon=1e-5, dtype=owner.dtype_policy, name=f"{name}_norm"
            )
            self.norm.build((None, dim))
            setattr(owner, f"{name}_norm", self.norm)
        self.compute_dtype = owner.compute_dtype

    def __call__(self, x: Any) -> Any:
        """[..., Dh] float32 -> [..., Dh] float32."""
        y = self.dense(ops.cast(x, self.compute_dtype))
        if self.norm is not None:
            y = self.norm(y)
        return ops.cast(y, "float32")
