"""Backbone: the stack every partf model is built on.

Token ids -> embedding * sqrt(d_model) (+ absolute positions) -> dropout -> a stack of
`StochasticBlock`s -> hidden states [B, T, D]. A fixed block is a block with one
candidate (LayerNorm(x + sublayer(x))); a PAR search's block mixes several. The causal
`PARTransformerXL` runs it through `forward` (states in, states out, XL memory); the
bidirectional `Encoder` (and `MaskedLanguageModel`) through `encode`, without memory.
`BackboneOwner` gives a task model its backbone's layers as its own attributes. The
backbone has no variables of its own."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import keras
from keras import ops

from partf.attention.positions import sinusoid, stream_positions
from partf.layers.stochastic_block import StochasticBlock
from partf.random import Dropout
from partf.serialization import FORMAT_KEY, FORMAT_VERSION, check_complete, check_format

if TYPE_CHECKING:
    from partf.models.config import ModelConfig

# Nested per block, then per candidate: name -> tensor; with absolute positions block 0's
# list ends with {"position": int32 [B]}.
States = list[list[dict[str, Any]]]


class Backbone(keras.layers.Layer):
    """Embedding, absolute positions, input dropout and the blocks, built from the task
    model's `ModelConfig` (`causal` says which: the language model's `forward` or the
    encoder's `encode`); `seed` seeds the blocks' Gumbel noise (block i uses seed + i)."""

    def __init__(self, config: ModelConfig, seed: int | None = None, **kwargs: Any) -> None:
        config.check_data()  # a run's config before its data has no vocabulary size yet
        super().__init__(**kwargs)
        policy = self.dtype_policy
        self.d_model = config.d_model
        self.position = config.position
        self.max_positions = config.max_positions
        self.causal = config.causal
        # An unseeded initializer or seed generator draws its seed when it is made, so
        # this order (embedding, dropout, blocks, position table) fixes the weights a
        # model of a given seed (keras.utils.set_random_seed) starts from.
        self.embedding = keras.layers.Embedding(
            config.vocab_size, config.d_model, dtype=policy, name="embedding"
        )
        self.input_dropout = Dropout(config.dropout_rate, dtype=policy, name="input_dropout")
        self.blocks = [
            StochasticBlock(
                config.block_settings,
                candidates,
                seed=None if seed is None else seed + i,
                dtype=policy,
                name=f"block_{i}",
            )
            for i, candidates in enumerate(config.block_candidates)
        ]
        self.position_embedding = None
        if self.position == "learned":
            self.position_embedding = keras.layers.Embedding(
                self.max_positions, self.d_model, dtype=policy, name="position_embedding"
            )

    def build(self, input_shape: Any = None) -> None:
        """Builds every layer for token ids of `input_shape` (default (None, None))."""
        tokens = (None, None) if input_shape is None else tuple(input_shape)
        self.embedding.build(tokens)
        for block in self.blocks:
            block.build((*tokens, self.d_model))
        if self.position_embedding is not None:
            self.position_embedding.build(tokens)
        self.built = True

    # -------------------------------------------------------------- positions
    @property
    def absolute_positions(self) -> bool:
        """Whether positions are added to the embeddings (sinusoidal or learned)."""
        return self.position in ("sinusoidal", "learned")

    @property
    def position_limit(self) -> int | None:
        """Tokens a stream may hold before learned positions run out (None: no limit)."""
        return self.max_positions if self.position == "learned" else None

    def check_positions(self, tokens_per_stream: int) -> None:
        """Refuses (ValueError) a stream of `tokens_per_stream` real tokens, read by one row
        before its state is reset, that learned positions cannot number."""
        limit = self.position_limit
        if limit is not None and tokens_per_stream > limit:
            raise ValueError(
                f"learned positions number {limit} tokens (max_positions) but a stream here "
                f"holds {tokens_per_stream}; set max_positions >= {tokens_per_stream} or use "
                "position sinusoidal or rotary, which have no limit."
            )

    # Two ways of adding positions, each kept exactly as its model was trained: a saved
    # model must keep its meaning, and a fresh one its numbers. The encoder (`embed`)
    # adds learned positions as they are and clamps a position past the table to its
    # last row; the causal model (`_add_stream_positions`) scales them by sqrt(d_model),
    # like the token embedding, and past the table makes them NaN when traced (an
    # eager call raises a clear error instead). Sinusoids are added unscaled by both.
    def embed(self, tokens: Any, mask: Any, training: bool | None = None) -> Any:
        """The encoder's input [B, T, D]: the scaled embedding, plus absolute positions
        counting the real tokens before each token (padding does not shift later
        positions), dropped out."""
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

    def _add_stream_positions(self, x: Any, positions: Any) -> Any:
        """The causal model's: x [B, T, D] plus the encoding of `positions` int32 [B, T],
        in x's dtype."""
        if self.position == "sinusoidal":
            return x + sinusoid(positions, self.d_model, x.dtype)
        limit = self.max_positions
        if not _traced(positions):  # eager: a clear error now
            last = int(ops.convert_to_numpy(ops.max(positions)))
            self.check_positions(last + 1)
        # Compiled, no error can be raised: past the table the embedding is NaN (the loss
        # turns NaN and training stops), never a silently reused row.
        learned = self.position_embedding(ops.minimum(positions, limit - 1))
        learned = ops.where((positions < limit)[..., None], learned, float("nan"))
        scale = ops.cast(math.sqrt(self.d_model), x.dtype)
        return x + ops.cast(learned, x.dtype) * scale

    # ------------------------------------------------------- whole sequences
    def encode(
        self,
        tokens: Any,
        mask: Any,
        tau: Any = None,
        training: bool | None = None,
        mode: str | None = None,
    ) -> Any:
        """Hidden states [B, T, D] of whole sequences (no memory): token ids int [B, T],
        padding mask bool [B, T], the temperature (for sampled weights), training, and
        the block weights' `mode`."""
        x = self.embed(tokens, mask, training=training)
        for block in self.blocks:
            x, _ = block(x, tau=tau, mask=mask, training=training, mode=mode)
        return x

    # ---------------------------------------------------------------- streams
    def initial_state(self, batch_size: int) -> States:
        """Empty states ("no context") for `forward`, per block and candidate; with
        absolute positions block 0's list ends with {"position": zeros int32 [B]}."""
        states = [block.get_initial_state(batch_size) for block in self.blocks]
        if self.absolute_positions:
            states[0] = [*states[0], {"position": ops.zeros((batch_size,), "int32")}]
        return states

    def split_position_state(self, states: States) -> tuple[States, Any | None]:
        """(the blocks' states, the stream position int32 [B] or None): with absolute
        positions, block 0's list carries the position after its candidates."""
        if not self.absolute_positions:
            return states, None
        first = list(states[0])
        if len(first) != self.blocks[0].num_candidates + 1 or "position" not in first[-1]:
            raise ValueError(
                "these states hold no stream position, but the model adds absolute positions; "
                "start from model.initial_state(batch) and pass on what forward returns."
            )
        return [first[:-1], *states[1:]], first[-1]["position"]

    def resolve_choices(self, choices: Sequence[int | None] | None) -> list[int | None]:
        """`choices` as a list of one entry per block (None: [None] * blocks), checked
        (ValueError: not one entry per block, or a candidate a block does not have)."""
        if choices is None:
            return [None] * len(self.blocks)
        choices = list(choices)
        if len(choices) != len(self.blocks):
            raise ValueError(
                f"choices has {len(choices)} entries but the model {len(self.blocks)} blocks; "
                "give one per block (None runs the whole block)."
            )
        for b, (block, choice) in enumerate(zip(self.blocks, choices, strict=True)):
            if choice is not None and not 0 <= choice < block.num_candidates:
                raise ValueError(
                    f"choices[{b}] = {choice} but block {b} has {block.num_candidates} "
                    f"candidates ({', '.join(block.candidates)}); use 0 to "
                    f"{block.num_candidates - 1}, or None."
                )
        return choices

    def forward(
        self,
        tokens: Any,
        states: States,
        tau: Any = None,
        training: bool = False,
        choices: Sequence[int | None] | None = None,
        mode: str | None = None,
        sample_paths: bool = False,
    ) -> tuple[Any, States, list[Any]]:
        """The causal stack on one segment of a stream, writing no variable, as
        `PARTransformerXL.forward`; `tau` is the mixed blocks' temperature (None when no
        block samples), and `sample_paths` runs one candidate drawn from pi per searched
        block (`StochasticBlock.run_sampled`). Returns (hidden [B, T, d_model], new states,
        log pi of the candidate drawn in each block that drew one)."""
        choices = self.resolve_choices(choices)
        tokens = ops.cast(ops.convert_to_tensor(tokens), "int32")
        mask = ops.not_equal(tokens, 0)  # [B, T]
        states, position = self.split_position_state(states)
        x = self.embedding(tokens)  # [B, T, D]
        x = x * ops.cast(math.sqrt(self.d_model), x.dtype)
        if position is not None:
            positions, position = stream_positions(position, mask)
            x = self._add_stream_positions(x, positions)
        x = self.input_dropout(x, training=training)
        new_states, log_probs = [], []
        for block, block_states, choice in zip(self.blocks, states, choices, strict=True):
            if choice is None and sample_paths and block.arch_logits is not None:
                index = block.sample_index()
                x, block_states = block.run_sampled(
                    index, x, block_states, mask=mask, training=training
                )
                log_probs.append(block.log_pi(index))
            elif choice is None:
                x, block_states = block(
                    x, states=block_states, tau=tau, mask=mask, training=training, mode=mode
                )
            else:
                x, state = block.run_candidate(
                    choice, x, block_states[choice], mask=mask, training=training
                )
                block_states = [*block_states[:choice], state, *block_states[choice + 1 :]]
            new_states.append(block_states)
        if position is not None:
            new_states[0] = [*new_states[0], {"position": position}]
        return x, new_states, log_probs


def _traced(value: Any) -> bool:
    """Whether `value` is symbolic (inside tf.function or a JAX trace), so that
    its contents cannot be read on the host."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return not tf.executing_eagerly()
    if backend == "jax":
        import jax

        return isinstance(value, jax.core.Tracer)
    return False


class BackboneOwner:
    """Mixin for a task model that keeps its stack in `self.backbone`: reads the
    backbone's layers as the model's own attributes (`model.blocks`, `model.embedding`)."""

    backbone: Backbone
    config: ModelConfig

    @property
    def blocks(self) -> list[StochasticBlock]:
        """The backbone's stochastic blocks (a fixed block has one candidate)."""
        return self.backbone.blocks

    @property
    def embedding(self) -> keras.layers.Embedding:
        """The token embedding (tied to the output layer where the model ties them)."""
        return self.backbone.embedding

    @property
    def position_embedding(self) -> keras.layers.Embedding | None:
        """The learned position table (position "learned"), else None."""
        return self.backbone.position_embedding

    def check_positions(self, tokens_per_stream: int) -> None:
        """The backbone's `check_positions`."""
        self.backbone.check_positions(tokens_per_stream)

    # ---------------------------------------------------------- serialization
    # A task model saves its ModelConfig whole (every field, `ModelConfig.to_dict`) and
    # the format it is in; a task model with settings of its own (the Encoder's heads)
    # adds them to this dict, and `from_config` passes them back as keyword arguments.
    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "config": self.config.to_dict(),
            FORMAT_KEY: FORMAT_VERSION,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        """Builds the model a saved config describes (FormatError: of another partf format,
        or lacking a setting)."""
        from partf.models.config import ModelConfig

        what = f"the saved {cls.__name__}"
        check_format(config, what)
        check_complete(config, cls, what)  # its config and its own settings (the heads)
        config = dict(config)
        config.pop(FORMAT_KEY)
        model_config = ModelConfig.from_dict(config.pop("config"), saved=f"{what}'s config")
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(model_config, **config)
