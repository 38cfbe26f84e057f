"""Backbone: the stack every partf model is built on (issue 38).

Token ids -> embedding * sqrt(d_model) (+ absolute positions) -> dropout -> a stack of
`StochasticBlock`s -> hidden states [B, T, D]. A fixed block is a block with one
candidate (its sublayer with residual and post-LayerNorm, LayerNorm(x + sublayer(x)));
a PAR search's block mixes several. The task models own the backbone and put their
heads, temperature and step counter on top: today the bidirectional `Encoder` (and so
`MaskedLanguageModel`), which runs it with `causal=False` over whole sequences.

The backbone has no variables of its own. Task models that moved onto it load weights
files of their earlier layout through `partf.models.legacy_layout`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from partf.attention.positions import sinusoid, stream_positions
from partf.layers.stochastic_block import StochasticBlock
from partf.random import Dropout


class Backbone(keras.layers.Layer):
    """Embedding, absolute positions, input dropout and the blocks.

    Args:
        vocab_size, d_model, num_heads, d_ffn: sizes, as the task model's.
        block_candidates: per block, its candidates (one name: a fixed block), each
            "attention" (for `attention`), "dense", "identity" or a registry name.
        attention: the registry name "attention" stands for.
        attention_options: mechanism options (each mechanism takes the ones it knows).
        position: "sinusoidal", "learned" (a table of `max_positions`), "rotary" (inside
            the attentions) or "none".
        max_positions: positions a learned table holds (later ones use its last row).
        dropout_rate: dropout on the embeddings, attention weights and block outputs.
        causal: whether the blocks' attentions are causal.
        straight_through, eval_mode, sample_per_example: a search's block weights (see
            `StochasticBlock`).
        seed: seed of the blocks' Gumbel noise (block i uses seed + i).

    Call args (`encode`): token ids int [B, T], padding mask bool [B, T], the
    temperature (for sampled weights), training, and the block weights' `mode`.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        d_ffn: int,
        block_candidates: Sequence[Sequence[str]],
        attention: str,
        attention_options: dict[str, Any],
        position: str,
        max_positions: int,
        dropout_rate: float,
        causal: bool = False,
        straight_through: bool = False,
        eval_mode: str = "argmax",
        sample_per_example: bool = False,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.d_model = d_model
        self.position = position
        self.max_positions = max_positions
        self.causal = bool(causal)
        self.embedding = keras.layers.Embedding(vocab_size, d_model, dtype=policy, name="embedding")
        self.position_embedding = None
        if position == "learned":
            self.position_embedding = keras.layers.Embedding(
                max_positions, d_model, dtype=policy, name="position_embedding"
            )
        self.input_dropout = Dropout(dropout_rate, dtype=policy, name="input_dropout")
        options = dict(attention_options)
        if position == "rotary":
            options["rotary"] = True
        self.blocks = [
            StochasticBlock(
                d_model,
                num_heads,
                d_ffn,
                candidates=tuple(candidates),
                attention=attention,
                attention_options=options,
                dropout_rate=dropout_rate,
                straight_through=straight_through,
                eval_mode=eval_mode,
                sample_per_example=sample_per_example,
                seed=None if seed is None else seed + i,
                causal=self.causal,
                dtype=policy,
                name=f"block_{i}",
            )
            for i, candidates in enumerate(block_candidates)
        ]

    def build(self, input_shape: Any = None) -> None:
        self.embedding.build((None, None))
        if self.position_embedding is not None:
            self.position_embedding.build((None, None))
        for block in self.blocks:
            block.build((None, None, self.d_model))
        self.built = True

    def embed(self, tokens: Any, mask: Any, training: bool | None = None) -> Any:
        """[B, T, D]: the scaled embedding, plus absolute positions counting the real
        tokens before each token (padding does not shift later positions), dropped out."""
        x = self.embedding(tokens)
        x = x * ops.cast(math.sqrt(self.d_model), x.dtype)
        if self.position in ("sinusoidal", "learned"):
            start = ops.zeros((ops.shape(tokens)[0],), "int32")
            positions, _ = stream_positions(start, mask)  # [B, T]
            if self.position == "sinusoidal":
                x = x + sinusoid(positions, self.d_model, x.dtype)
            else:
                limit = self.max_positions - 1
                x = x + self.position_embedding(ops.minimum(positions, limit))
        return self.input_dropout(x, training=training)

    def encode(
        self,
        tokens: Any,
        mask: Any,
        tau: Any = None,
        training: bool | None = None,
        mode: str | None = None,
    ) -> Any:
        """Hidden states [B, T, D] of whole sequences (no memory)."""
        x = self.embed(tokens, mask, training=training)
        for block in self.blocks:
            x, _ = block(x, tau=tau, mask=mask, training=training, mode=mode)
        return x
