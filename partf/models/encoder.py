"""Encoder: a bidirectional Transformer over whole sequences, for classification and MLM.

A non-causal `Backbone` gives hidden states [B, T, D], with optional heads: sequence
classification (mean over the real tokens or the first token, then a two-layer MLP, as
the Long Range Arena classifiers) and masked-language-model logits (BERT's transform,
layer norm and output tied to the embedding). With `architecture` unset every block is a
PAR search's mix, tau annealed from the model's own step counter. Token id 0 is padding
unless a mask is given.

References:
    Devlin et al., "BERT", NAACL 2019 (the MLM head).
    Tay et al., "Long Range Arena", ICLR 2021 (the classification setting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from partf.models.backbone import Backbone, BackboneOwner
from partf.models.config import ARCHITECTURE_PRESETS, ModelConfig, parse_block_candidates
from partf.models.search_interface import SearchInterface
from partf.serialization import register

#: How the classification head reads a sequence.
POOLINGS = ("mean", "first")


@register
class Encoder(SearchInterface, BackboneOwner, keras.Model):
    """A bidirectional Transformer encoder with optional classification and MLM heads,
    from a `ModelConfig` with `causal=False` (what `--objective=mlm` trains) or its dict,
    keyword arguments as `ModelConfig.of` takes them. `num_classes`: classes of the
    sequence-classification head (0: none), which reads `pooling` "mean" over the real
    tokens or the "first" token; `seed`: the blocks' Gumbel noise's (`Backbone`).

    A call takes token ids int [B, T] or {"tokens", optionally "mask"} (else
    tokens != 0), and `mode` as `PARTransformerXL`. It returns the hidden states without
    heads, float32 class logits [B, num_classes] or MLM logits [B, T, vocab_size] with
    one head, {"classes", "mlm"} with both.

    Example:
        >>> model = Encoder(vocab_size=20, d_model=16, num_heads=2, d_ffn=32,
        ...                 architecture="A D", attention="linear", num_classes=10)
        >>> tuple(model(keras.ops.ones((3, 7), "int32")).shape)
        (3, 10)"""

    def __init__(
        self,
        config: ModelConfig | dict[str, Any] | None = None,
        num_classes: int = 0,
        pooling: str = "mean",
        mlm_head: bool = False,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        # Keyword settings alone mean an encoder: causal=False, and an architecture given
        # without num_layers sets it (one block per token).
        architecture = kwargs.get("architecture")
        if config is None:
            kwargs.setdefault("causal", False)
            if architecture and architecture not in ARCHITECTURE_PRESETS:
                kwargs.setdefault("num_layers", len(parse_block_candidates(architecture)))
        config = ModelConfig.of(config, kwargs)
        if config.causal:
            raise ValueError(
                "the Encoder is bidirectional: give a ModelConfig with causal=False (the causal "
                "language model is PARTransformerXL)."
            )
        super().__init__(**kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}.")
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0, got {num_classes}.")
        self.config = config
        self.num_classes = num_classes
        self.pooling = pooling
        self.mlm_head = bool(mlm_head)
        self.seed = seed

        policy = self.dtype_policy
        self.backbone = Backbone(config, seed=seed, dtype=policy, name="backbone")
        # The search's temperature and step counter, made only for a search.
        self.temperature = self.step = None
        if self.is_search:
            self.temperature = self._make_temperature(config)
            self.step = self._add_step_counter()
        self.classifier_hidden = self.classifier = None
        if num_classes:
            self.classifier_hidden = keras.layers.Dense(
                config.d_model, activation="relu", dtype=policy, name="classifier_hidden"
            )
            # Logits in float32 under mixed precision, as the causal model's softmax.
            self.classifier = keras.layers.Dense(
                num_classes, dtype=policy.variable_dtype, name="classifier"
            )
        self.mlm_transform = self.mlm_norm = None
        if self.mlm_head:
            self.mlm_transform = keras.layers.Dense(
                config.d_model, activation="gelu", dtype=policy, name="mlm_transform"
            )
            self.mlm_norm = keras.layers.LayerNormalization(
                epsilon=1e-5, dtype=policy, name="mlm_norm"
            )
        # Everything is known from the arguments: build now. Keras would otherwise build
        # the model inside the first traced training step, and under XLA a variable whose
        # initial value is computed from a seed (Performer's random features) cannot be
        # created there.
        self.build(None)

    @property
    def is_search(self) -> bool:
        """Whether the blocks are PAR stochastic blocks (`architecture` unset)."""
        return self.config.architecture is None

    @property
    def candidates(self) -> tuple[str, ...] | None:
        """A search's block choices; None for a fixed architecture."""
        return self.config.candidates if self.is_search else None

    def build(self, input_shape: Any = None) -> None:
        if self.built:
            return
        hidden = (None, None, self.config.d_model)
        self.backbone.build()
        if self.num_classes:
            self.classifier_hidden.build((None, self.config.d_model))
            self.classifier.build((None, self.config.d_model))
        if self.mlm_head:
            self.mlm_transform.build(hidden)
            self.mlm_norm.build(hidden)
            self.mlm_bias = self.add_weight(
                name="mlm_bias",
                shape=(self.config.vocab_size,),
                initializer="zeros",
                dtype="float32",
            )
        self.built = True

    # ------------------------------------------------------------------ call
    def check_length(self, length: int) -> None:
        """Refuses sequences longer than learned positions can number (one line)."""
        limit = self.backbone.position_limit
        if limit is not None and length > limit:
            raise ValueError(
                f"learned positions number {limit} tokens (max_positions) but "
                f"these sequences have {length}; set max_positions >= {length} or shorten them."
            )

    def encode(
        self, tokens: Any, mask: Any, training: bool | None = None, mode: str | None = None
    ) -> Any:
        """Hidden states [B, T, D] of token ids [B, T] with padding mask bool [B, T];
        a search's block weights by `mode` (see `call`)."""
        if tokens.shape[1] is not None:
            self.check_length(int(tokens.shape[1]))
        tau = None
        if self.is_search:
            # Only sampled weights read tau.
            modes = {block.weight_mode(training, mode) for block in self.blocks}
            tau = self.tau() if "sample" in modes else None
        return self.backbone.encode(tokens, mask, tau=tau, training=training, mode=mode)

    def pool(self, hidden: Any, mask: Any) -> Any:
        """[B, D]: the mean over the real tokens, or the first token."""
        if self.pooling == "first":
            return hidden[:, 0]
        weights = ops.cast(mask, hidden.dtype)[..., None]
        total = ops.sum(hidden * weights, axis=1)
        return total / ops.maximum(ops.sum(weights, axis=1), 1.0)

    def classify(self, hidden: Any, mask: Any) -> Any:
        """Class logits [B, num_classes], float32."""
        pooled = self.classifier_hidden(self.pool(hidden, mask))
        return ops.cast(self.classifier(ops.cast(pooled, "float32")), "float32")

    def mlm_logits(self, hidden: Any) -> Any:
        """Logits over the vocabulary [B, T, vocab_size], float32, from the output
        embedding tied to the input one (BERT)."""
        h = ops.cast(self.mlm_norm(self.mlm_transform(hidden)), "float32")
        table = ops.cast(self.embedding.embeddings, "float32")  # [V, D]
        # Read in float32: Keras would autocast the variable to the compute dtype here.
        return ops.matmul(h, ops.transpose(table)) + ops.cast(self.mlm_bias, "float32")

    def call(self, inputs: Any, training: bool | None = None, mode: str | None = None) -> Any:
        mask = inputs.get("mask") if isinstance(inputs, dict) else None
        tokens = ops.cast(inputs["tokens"] if isinstance(inputs, dict) else inputs, "int32")
        mask = ops.not_equal(tokens, 0) if mask is None else ops.cast(mask, "bool")
        hidden = self.encode(tokens, mask, training=training, mode=mode)
        if training and self.is_search:
            self.step.assign_add(1)
        outputs = {}
        if self.num_classes:
            outputs["classes"] = self.classify(hidden, mask)
        if self.mlm_head:
            outputs["mlm"] = self.mlm_logits(hidden)
        if not outputs:
            return hidden
        return outputs if len(outputs) > 1 else next(iter(outputs.values()))

    # ----------------------------------------------------------------- search
    def tau(self) -> Any:
        """The current Gumbel-softmax temperature (float32 scalar) of a search."""
        if not self.is_search:
            raise ValueError("a fixed-architecture encoder has no temperature; give candidates.")
        return super().tau()

    def _fixed_architecture(self) -> str | None:
        return None if self.is_search else self.config.architecture

    def _search_candidates(self) -> Sequence[str]:
        return self.candidates

    def get_config(self) -> dict[str, Any]:
        heads = dict(num_classes=self.num_classes, pooling=self.pooling, mlm_head=self.mlm_head)
        return {**super().get_config(), **heads, "seed": self.seed}
