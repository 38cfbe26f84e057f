"""Position-wise feed-forward network (the "dense" PAR candidate)."""

from __future__ import annotations

from typing import Any

import keras

from partf.random import Dropout
from partf.serialization import register


@register
class FeedForward(keras.layers.Layer):
    """Two dense layers applied at every position, then dropout: y = dropout(W2 act(W1 x +
    b1) + b2), as the original PAR project (which, unlike Transformer-XL, has no dropout
    between the two layers). A call maps x [B, T, D] to [B, T, D]; `d_ffn` is the inner
    width, `activation` the inner layer's (a Keras name).

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.3.
    """

    def __init__(
        self,
        d_model: int,
        d_ffn: int,
        dropout_rate: float = 0.0,
        activation: str = "relu",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if d_model <= 0 or d_ffn <= 0:
            raise ValueError(f"d_model and d_ffn must be positive, got {d_model} and {d_ffn}.")
        self.d_model = d_model
        self.d_ffn = d_ffn
        self.dropout_rate = dropout_rate
        self.activation = activation
        self.inner = keras.layers.Dense(
            d_ffn, activation=activation, dtype=self.dtype_policy, name="inner"
        )
        self.outer = keras.layers.Dense(d_model, dtype=self.dtype_policy, name="outer")
        self.dropout = Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        self.inner.build(input_shape)
        self.outer.build((*input_shape[:-1], self.d_ffn))
        self.built = True

    def call(self, x: Any, training: bool | None = None) -> Any:
        return self.dropout(self.outer(self.inner(x)), training=training)

    def flops_per_token(self, seq_len: int = 1, batch_size: int = 1) -> float:
        """Forward FLOPs per token (2 per multiply-add): the two dense layers."""
        return 4.0 * self.d_model * self.d_ffn

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple:
        return (*input_shape[:-1], self.d_model)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            d_ffn=self.d_ffn,
            dropout_rate=self.dropout_rate,
            activation=self.activation,
        )
        return config
