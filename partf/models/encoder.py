"""Encoder: a bidirectional Transformer over whole sequences, for classification and MLM.

Token ids -> embedding * sqrt(d_model) (+ absolute positions) -> dropout -> a stack of
blocks -> hidden states [B, T, D], then optional heads: sequence classification (mean
over the real tokens or the first token, then a two-layer MLP, as the Long Range Arena
classifiers) and masked-language-model logits over the vocabulary (BERT's transform,
layer norm and output tied to the embedding).

The embedding, positions and blocks are a `Backbone` (partf.models.backbone) run with
`causal=False`; the heads, the temperature and the step counter are the Encoder's own.
Each block is one letter of `architecture`, as in the causal model: "A" an attention of
the chosen mechanism, "D" a feed-forward network, "I" the identity, or an attention's
registry name; a `StochasticBlock` with that one candidate, its residual connection and
post-LayerNorm (LayerNorm(x + sublayer(x))). Every attention is built with
`causal=False`: each real token sees every other, padding is seen by none. A mechanism
without a non-causal form is refused when the model is built.

PAR search (`candidates`): every block is instead a Gumbel-softmax mix of the
candidates (non-causal attentions, "dense", "identity") with its own architecture
logits, as in the causal model. The temperature tau anneals from
the model's own step counter (`Temperature`, so a compiled `fit` needs no callback);
`pi()` and `architecture_string()` read the search, and the string it gives is a valid
`architecture` for training the fixed encoder it found.

Token id 0 is padding unless a mask is given. Positions count the real tokens before
each token (the convention of the causal model), so padding inside a sequence does not
shift the positions of the tokens after it.

References:
    Devlin et al., "BERT", NAACL 2019 (the MLM head).
    Tay et al., "Long Range Arena", ICLR 2021 (the classification setting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from partf.attention import attention_names
from partf.layers.candidates import candidate_kind
from partf.models.attention_defaults import pin_previous_defaults
from partf.models.backbone import Backbone, BackboneOwner
from partf.models.config import ModelConfig, parse_architecture
from partf.models.search_interface import SearchInterface
from partf.serialization import FORMAT_KEY, FORMAT_VERSION, check_format, register

#: Absolute position encodings of the encoder ("rotary" rotates inside the attentions).
ENCODER_POSITIONS = ("none", "sinusoidal", "learned", "rotary")
#: How the classification head reads a sequence.
POOLINGS = ("mean", "first")


def encoder_config(
    vocab_size: int | None,
    architecture: str | None = "A D A D",
    candidates: Sequence[str] | None = None,
    num_layers: int | None = None,
    position: str = "sinusoidal",
    **settings: Any,
) -> ModelConfig:
    """The `ModelConfig` (causal=False) of the Encoder's keyword arguments.

    A fixed encoder has `architecture`; a search (`candidates`) has `num_layers` blocks,
    or as many as `architecture` has. The other settings keep their ModelConfig names.
    The options are taken as given (`attention_defaults="authors"`): an older config's
    earlier defaults are written into them by `Encoder.from_config`.

    Raises:
        ValueError: a setting the encoder refuses, in one line.
    """
    if vocab_size is None:
        raise ValueError("the Encoder needs vocab_size (or config=, a ModelConfig).")
    if position not in ENCODER_POSITIONS:
        raise ValueError(
            f"unknown position {position!r}; choose one of {', '.join(ENCODER_POSITIONS)}."
        )
    if num_layers is not None and num_layers < 1:
        raise ValueError(f"num_layers must be >= 1 (or None), got {num_layers}.")
    if candidates is not None and not candidates:
        raise ValueError(
            "candidates is empty; give the search's choices, e.g. "
            "('softmax', 'dense', 'identity'), or None for a fixed architecture."
        )
    if candidates is None:
        if architecture is None:
            raise ValueError("give the encoder an architecture, e.g. 'A D A D', or candidates.")
        num_layers = len(parse_architecture(architecture))
    else:
        if num_layers is None:
            if architecture is None:
                raise ValueError("a search without an architecture needs num_layers.")
            num_layers = len(parse_architecture(architecture))
        architecture = None
        for name in candidates:
            candidate_kind(name, settings.get("attention", "softmax"))  # lists the valid
    return ModelConfig(
        vocab_size=vocab_size,
        architecture=architecture,
        candidates=tuple(candidates or ("attention", "dense", "identity")),
        num_layers=num_layers,
        position=position,
        causal=False,
        attention_defaults="authors",
        **settings,
    )


def _config_field(name: str, doc: str | None = None) -> property:
    """A read-only attribute holding the config's field `name`."""
    return property(lambda self: getattr(self.config, name), doc=doc or f"config.{name}")


@register
class Encoder(SearchInterface, BackboneOwner, keras.Model):
    """A bidirectional Transformer encoder with optional classification and MLM heads.

    Args:
        vocab_size: number of token ids (0 is padding).
        d_model, num_heads, d_ffn: widths of the blocks.
        architecture: one token per block, e.g. "A D A D": A (`attention`), D (dense),
            I (identity) or an attention registry name.
        attention: the registry name "A" stands for; it must have a non-causal form.
        attention_options: mechanism options (`window_size`, `num_features`, ...);
            options a mechanism does not take are ignored, as in `create_attention`.
        position: "sinusoidal", "learned" (a table of `max_positions`), "rotary"
            (inside the attentions that have a query-key product) or "none".
        max_positions: tokens learned positions can number.
        dropout_rate: dropout on the embeddings, attention weights and block outputs.
        num_classes: classes of the sequence-classification head (0: no head).
        pooling: "mean" over the real tokens or the "first" token, for that head.
        mlm_head: whether to add the masked-language-model head.
        candidates: None for the fixed `architecture`; else a PAR search: every block
            a stochastic block choosing among these names ("attention" for `attention`,
            "dense", "identity" or non-causal registry names), e.g.
            ("softmax", "dense", "identity") or ("linear", "eva", "dense").
        num_layers: blocks of a search (None: as many as `architecture` has).
        eval_mode: a search's block weights at evaluation: "argmax" (the discrete
            architecture), "expected" (pi) or "sample".
        straight_through: one-hot forward block weights with soft gradients.
        sample_per_example: one Gumbel sample per example, not per step.
        tau_schedule, tau_start, tau_end, tau_steps, tau_is_trainable: the Gumbel
            temperature (`Temperature`): annealed from tau_start to tau_end over
            tau_steps training calls (set it to the run's steps), or learned.
        seed: seed of the blocks' Gumbel noise (block i uses seed + i).
        config: instead of the keyword settings above, a `ModelConfig` with
            `causal=False` (what `--objective=mlm` trains): the encoder is built from it;
            `num_classes`, `pooling`, `mlm_head` and `seed` are still the Encoder's own.
            The keyword settings are read back from `config` (`model.config`) too.

    Call args:
        inputs: token ids int [B, T], or a dict with "tokens" and optionally "mask"
            (bool or 0/1 [B, T], True for real tokens; else tokens != 0).
        training: dropout, and a search's sampled block weights.
        mode: a search's block weights for this call, "argmax", "expected" or
            "sample"; None: sampled in training, `eval_mode` otherwise.

    Returns:
        hidden states [B, T, D] without heads; class logits [B, num_classes] or MLM
        logits [B, T, vocab_size] with one head; {"classes", "mlm"} with both.
        Logits are float32.

    Example:
        >>> model = Encoder(vocab_size=20, d_model=16, num_heads=2, d_ffn=32,
        ...                 architecture="A D", attention="linear", num_classes=10)
        >>> tuple(model(keras.ops.ones((3, 7), "int32")).shape)
        (3, 10)
        >>> model.config.causal  # the ModelConfig every partf model is built from
        False
    """

    def __init__(
        self,
        vocab_size: int | None = None,
        d_model: int = 128,
        num_heads: int = 4,
        d_ffn: int = 512,
        architecture: str | None = "A D A D",
        attention: str = "softmax",
        attention_options: dict[str, Any] | None = None,
        position: str = "sinusoidal",
        max_positions: int = 2048,
        dropout_rate: float = 0.1,
        num_classes: int = 0,
        pooling: str = "mean",
        mlm_head: bool = False,
        candidates: tuple[str, ...] | list[str] | None = None,
        num_layers: int | None = None,
        eval_mode: str = "argmax",
        straight_through: bool = False,
        sample_per_example: bool = False,
        tau_schedule: str = "exponential",
        tau_start: float = 1.0,
        tau_end: float = 0.1,
        tau_steps: int = 1,
        tau_is_trainable: bool = False,
        seed: int | None = None,
        config: ModelConfig | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}.")
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0, got {num_classes}.")
        if config is None:
            config = encoder_config(
                vocab_size,
                d_model=d_model,
                num_heads=num_heads,
                d_ffn=d_ffn,
                architecture=architecture,
                attention=attention,
                attention_options=attention_options,
                position=position,
                max_positions=max_positions,
                dropout_rate=dropout_rate,
                candidates=candidates,
                num_layers=num_layers,
                eval_mode=eval_mode,
                straight_through=straight_through,
                sample_per_example=sample_per_example,
                tau_schedule=tau_schedule,
                tau_start=tau_start,
                tau_end=tau_end,
                tau_steps=tau_steps,
                tau_is_trainable=tau_is_trainable,
            )
        elif vocab_size is not None:
            raise ValueError(
                "give the encoder's settings either as a ModelConfig (config=) or as keyword "
                "arguments, not both."
            )
        elif config.causal:
            raise ValueError(
                "the Encoder is bidirectional: give a ModelConfig with causal=False (the causal "
                "language model is PARTransformerXL)."
            )
        self.config = config
        self.num_classes = num_classes
        self.pooling = pooling
        self.mlm_head = bool(mlm_head)
        self.seed = seed

        policy = self.dtype_policy
        self.backbone = Backbone.from_model_config(config, seed=seed, dtype=policy, name="backbone")
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
        """Whether the blocks are PAR stochastic blocks (`candidates` given)."""
        return self.config.architecture is None

    # The settings, read from the config (the keyword arguments' names).
    vocab_size = _config_field("vocab_size")
    d_model = _config_field("d_model")
    num_heads = _config_field("num_heads")
    d_ffn = _config_field("d_ffn")
    num_layers = _config_field("num_layers")
    attention = _config_field("attention")
    attention_options = _config_field("attention_options")
    position = _config_field("position")
    max_positions = _config_field("max_positions")
    dropout_rate = _config_field("dropout_rate")
    eval_mode = _config_field("eval_mode")
    straight_through = _config_field("straight_through")
    sample_per_example = _config_field("sample_per_example")
    tau_schedule = _config_field("tau_schedule")
    tau_start = _config_field("tau_start")
    tau_end = _config_field("tau_end")
    tau_steps = _config_field("tau_steps")
    tau_is_trainable = _config_field("tau_is_trainable")
    architecture = _config_field("architecture", "the fixed architecture; None for a search")

    @property
    def candidates(self) -> tuple[str, ...] | None:
        """A search's block choices; None for a fixed architecture."""
        return self.config.candidates if self.is_search else None

    def build(self, input_shape: Any = None) -> None:
        if self.built:
            return
        hidden = (None, None, self.d_model)
        self.backbone.build()
        if self.num_classes:
            self.classifier_hidden.build((None, self.d_model))
            self.classifier.build((None, self.d_model))
        if self.mlm_head:
            self.mlm_transform.build(hidden)
            self.mlm_norm.build(hidden)
            self.mlm_bias = self.add_weight(
                name="mlm_bias", shape=(self.vocab_size,), initializer="zeros", dtype="float32"
            )
        self.built = True

    # ------------------------------------------------------------------ call
    def check_length(self, length: int) -> None:
        """Refuses sequences longer than learned positions can number (one line)."""
        if self.position == "learned" and length > self.max_positions:
            raise ValueError(
                f"learned positions number {self.max_positions} tokens (max_positions) but "
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
        if isinstance(inputs, dict):
            tokens = ops.cast(inputs["tokens"], "int32")
            mask = inputs.get("mask")
            mask = ops.not_equal(tokens, 0) if mask is None else ops.cast(mask, "bool")
        else:
            tokens = ops.cast(inputs, "int32")
            mask = ops.not_equal(tokens, 0)
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
        return None if self.is_search else self.architecture

    def _search_candidates(self) -> Sequence[str]:
        return self.candidates

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        model = self.config
        config.update(
            vocab_size=model.vocab_size,
            d_model=model.d_model,
            num_heads=model.num_heads,
            d_ffn=model.d_ffn,
            architecture=model.architecture,
            attention=model.attention,
            attention_options=dict(model.attention_options),
            position=model.position,
            max_positions=model.max_positions,
            dropout_rate=model.dropout_rate,
            num_classes=self.num_classes,
            pooling=self.pooling,
            mlm_head=self.mlm_head,
            candidates=None if self.candidates is None else list(self.candidates),
            num_layers=model.num_layers,
            eval_mode=model.eval_mode,
            straight_through=model.straight_through,
            sample_per_example=model.sample_per_example,
            tau_schedule=model.tau_schedule,
            tau_start=model.tau_start,
            tau_end=model.tau_end,
            tau_steps=model.tau_steps,
            tau_is_trainable=model.tau_is_trainable,
            seed=self.seed,
            # The generation of attention defaults the options mean (see `from_config`);
            # the options an earlier generation pinned are in attention_options.
            attention_defaults=model.attention_defaults,
        )
        config[FORMAT_KEY] = FORMAT_VERSION
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Encoder:
        """Builds the encoder a config describes. A config of an earlier generation of
        attention defaults (`partf.models.attention_defaults`, --attention_defaults) gets
        that generation's values written into its options, so it is built as it was
        trained.

        Raises:
            FormatError: the config is of another partf format (`partf.serialization`).
        """
        check_format(config, f"the saved {cls.__name__}")
        config = dict(config)
        config.pop(FORMAT_KEY)
        generation = config.pop("attention_defaults")
        used = {config.get("attention", "softmax"), *str(config.get("architecture")).split()}
        used |= set(config.get("candidates") or ())
        config["attention_options"] = pin_previous_defaults(
            dict(config.get("attention_options") or {}),
            sorted(used & set(attention_names())),
            generation,
        )
        return cls(**config)
