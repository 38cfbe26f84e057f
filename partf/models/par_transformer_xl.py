"""PARTransformerXL: the Pay-Attention-when-Required Transformer-XL language model.

Token ids -> embedding * sqrt(d_model) (+ absolute positions, if chosen) ->
dropout -> a stack of stochastic blocks (each a Gumbel-softmax mix of
attention with XL memory, a feed-forward network and the identity) ->
hidden states. An adaptive softmax on the hidden states gives the token
distribution (`log_probs`) and the training loss (`token_nll`, `compute_loss`).

The XL memory of every block lives in non-trainable variables sized for the
fixed context batch, like a stateful RNN: each `model(x, training=...)` call
reads it, attends over it and writes the new memory back, so `fit` and
`evaluate` (also XLA-compiled, several steps per execution) carry context
across batches without help. Training and evaluation have separate memory
variables, so evaluating never disturbs the training context. `forward`
is the pure form: states in, states out, no variable written.

Positions (`config.position`): relative attention encodes distances itself;
"sinusoidal" and "learned" add each token's absolute position in its stream to
the embeddings, "rotary" rotates queries and keys inside every attention that
has a query-key product. A position is the number of real tokens before the
token in its stream, so it continues across segments: the model carries the
count for absolute positions (block 0's states end with {"position": int32
[B]}), each rotary attention carries its own.

References:
    Mandava et al., "Pay Attention when Required", 2020. https://arxiv.org/abs/2009.04534
    Dai et al., "Transformer-XL", ACL 2019. https://arxiv.org/abs/1901.02860
    Grave et al., "Efficient softmax approximation for GPUs", ICML 2017.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from partf.attention.positions import sinusoid, stream_positions
from partf.layers.adaptive_softmax import AdaptiveSoftmax
from partf.layers.stochastic_block import StochasticBlock
from partf.layers.temperature import Temperature
from partf.models.config import ModelConfig
from partf.models.cost import expected_flops
from partf.models.loss import (
    add_layer_losses,
    attention_loss_logs,
    mean_token_loss,
    score_function_term,
    split_outputs,
)
from partf.models.memory import STATE_SETS, States, XLMemory
from partf.models.search_interface import SearchInterface
from partf.random import Dropout
from partf.serialization import register

# The memory's names stay importable from here, where they were first defined.
__all__ = ["STATE_SETS", "PARTransformerXL", "States"]

_CONFIG_FIELDS = frozenset(field.name for field in dataclasses.fields(ModelConfig))


@register
class PARTransformerXL(SearchInterface, XLMemory, keras.Model):
    """PAR Transformer-XL language model.

    Args:
        config: a `ModelConfig` (or its dict). Config fields may also be given
            as keyword arguments, overriding `config`'s; other keyword
            arguments (name, dtype) go to `keras.Model`.

    Call args:
        inputs: int [B, T] token ids, 0 = padding; B must equal
            `config.batch_size` when the model has memory.
        training: True uses (and updates) the training memory, samples the
            block weights and increments `step`; False uses the evaluation
            memory and the deterministic `eval_mode` weights.
        mode: the block weights of this call: "argmax", "expected" or "sample";
            None: sampled in training, `eval_mode` otherwise (see `forward`).

    Returns:
        [B, T, d_model] hidden states (feed to `token_nll` / `log_probs`). In
        training, a sampled-path search (`search_estimator="sampled"`) returns
        {"hidden": those states, "path_log_probs": log pi of the path drawn in each
        block}: `compute_loss` needs both (`split_outputs` takes them apart).

    Example:
        >>> model = PARTransformerXL(vocab_size=100, d_model=16, num_heads=2, d_ffn=32,
        ...                          num_layers=2, mem_len=4, cutoffs=(20,), batch_size=2)
        >>> x = keras.ops.ones((2, 6), "int32")
        >>> model.compile(optimizer="adam")
        >>> history = model.fit(x, x, epochs=1, verbose=0)  # loss from compute_loss
        >>> model.pi().shape  # softmax of each block's architecture logits
        (2, 3)
    """

    def __init__(self, config: ModelConfig | dict[str, Any] | None = None, **kwargs: Any) -> None:
        overrides = {key: kwargs.pop(key) for key in list(kwargs) if key in _CONFIG_FIELDS}
        if config is None:
            config = ModelConfig(**overrides)
        elif isinstance(config, dict):
            config = ModelConfig.from_dict({**config, **overrides})
        elif overrides:
            config = config.replace(**overrides)
        if not config.causal:
            raise ValueError(
                "PARTransformerXL is the causal model; causal=False is the bidirectional "
                "Encoder's (partf.models.Encoder, MaskedLanguageModel)."
            )
        super().__init__(**kwargs)
        self.config = config
        policy = self.dtype_policy

        self.embedding = keras.layers.Embedding(
            config.vocab_size, config.d_model, dtype=policy, name="embedding"
        )
        self.input_dropout = Dropout(config.dropout_rate, dtype=policy, name="input_dropout")
        self.temperature = Temperature(
            config.tau_schedule,
            config.tau_start,
            config.tau_end,
            config.tau_steps,
            config.tau_is_trainable,
            name="temperature",
        )
        attention_options = dict(config.attention_options)
        if config.position == "rotary":
            attention_options["rotary"] = True
        self.blocks = [
            StochasticBlock(
                config.d_model,
                config.num_heads,
                config.d_ffn,
                candidates=candidates,
                attention=config.attention,
                attention_options=attention_options,
                mem_len=config.mem_len,
                clamp_len=config.clamp_len,
                dropout_rate=config.dropout_rate,
                straight_through=config.straight_through,
                eval_mode=config.eval_mode,
                sample_per_example=config.sample_per_example,
                arch_parameterization=config.arch_parameterization,
                dtype=policy,
                name=f"block_{i}",
            )
            for i, candidates in enumerate(config.block_candidates)
        ]
        # The output distribution and loss stay in float32 under mixed precision.
        self.output_layer = AdaptiveSoftmax(
            config.vocab_size,
            config.cutoffs,
            config.proj_factor,
            config.proj_dims,
            config.tie_embeddings,
            dtype=policy.variable_dtype,
            name="adaptive_softmax",
        )
        self.step = self._add_step_counter()
        # The XL memory (partf.models.memory): every block's state, per set.
        self._add_block_states()
        # The sampled-path search's loss baseline, a running mean [sum, weight] (divided
        # out, so the first steps are not biased toward zero). Made last and only for that
        # search: training checkpoints restore by path, but a .keras file stores the
        # model's own variables by position, so every other model keeps its order.
        self.search_baseline = None
        if config.is_stochastic and config.search_estimator == "sampled":
            self.search_baseline = self.add_weight(
                name="search_baseline",
                shape=(2,),
                dtype="float32",
                initializer="zeros",
                trainable=False,
                aggregation="only_first_replica",
            )
        # Absolute positions: the stream position reached, one count per row and set,
        # and for learned positions their table. Made last, and only when chosen, so
        # every other model keeps its variables and their order (.keras files store them
        # by position).
        self._add_position_states()
        self.position_embedding = None
        if config.position == "learned":
            self.position_embedding = keras.layers.Embedding(
                config.max_positions, config.d_model, dtype=policy, name="position_embedding"
            )
        # Everything is known from the config: build now, so a loaded model
        # has all its variables before the weights are restored.
        self.build((config.batch_size, None))

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        if self.built:
            return
        hidden_shape = (*input_shape, self.config.d_model)
        self.embedding.build(input_shape)
        for block in self.blocks:
            block.build(hidden_shape)
        self.output_layer.build(hidden_shape)
        if self.position_embedding is not None:
            self.position_embedding.build(input_shape)

    # -------------------------------------------------------------- positions
    @property
    def position_limit(self) -> int | None:
        """Tokens a stream may hold before learned positions run out (None: no limit)."""
        return self.config.max_positions if self.config.position == "learned" else None

    def check_positions(self, tokens_per_stream: int) -> None:
        """Refuses a stream longer than learned positions can number.

        Args:
            tokens_per_stream: real tokens one row will read before its state is reset
                (a split: batches x sequence length).

        Raises:
            ValueError: the stream reaches position `max_positions` or beyond.
        """
        limit = self.position_limit
        if limit is not None and tokens_per_stream > limit:
            raise ValueError(
                f"learned positions number {limit} tokens (max_positions) but a stream here "
                f"holds {tokens_per_stream}; set max_positions >= {tokens_per_stream} or use "
                "position sinusoidal or rotary, which have no limit."
            )

    def _add_positions(self, x: Any, positions: Any) -> Any:
        """x [B, T, D] plus the encoding of `positions` int32 [B, T], in x's dtype."""
        if self.config.position == "sinusoidal":
            return x + sinusoid(positions, self.config.d_model, x.dtype)
        limit = self.config.max_positions
        if not _traced(positions):  # eager: a clear error now
            last = int(ops.convert_to_numpy(ops.max(positions)))
            self.check_positions(last + 1)
        # Compiled, no error can be raised: past the table the embedding is NaN (the loss
        # turns NaN and training stops), never a silently reused row.
        learned = self.position_embedding(ops.minimum(positions, limit - 1))
        learned = ops.where((positions < limit)[..., None], learned, float("nan"))
        scale = ops.cast(math.sqrt(self.config.d_model), x.dtype)
        return x + ops.cast(learned, x.dtype) * scale

    # ---------------------------------------------------------------- forward
    def forward(
        self,
        inputs: Any,
        states: States,
        training: bool = False,
        choices: Sequence[int | None] | None = None,
        mode: str | None = None,
    ) -> tuple[Any, States]:
        """Pure forward pass: writes no variable.

        Args:
            inputs: int [B, T] token ids, 0 = padding.
            states: from `initial_state(B)` or a previous `forward` (with absolute
                positions, block 0's list ends with the stream position).
            training: dropout and sampled block weights (for a sampled-path search,
                one candidate per block drawn from pi).
            choices: optional, one entry per block: the index of the candidate to
                run alone in that block, or None to run the whole block (every
                candidate, mixed by its weights). A block run alone returns its
                candidate's output and carries its other candidates' states
                unchanged. With each block's argmax candidate (`eval_mode="argmax"`)
                the hidden states equal those of the full pass; generation uses
                this to skip the candidates that weigh zero.
            mode: the mixed blocks' weights, "argmax", "expected" or "sample"; None:
                sampled in training, each block's `eval_mode` otherwise. Given, it
                holds in training too (every candidate runs, even in a sampled-path
                search). An argument rather than a setting, so that a compiled
                function keeps the weights it was traced with.

        Returns:
            (hidden [B, T, d_model], new_states).

        Raises:
            ValueError: `choices` does not give one entry per block, or names a
                candidate a block does not have.
        """
        hidden, new_states, _ = self._forward(inputs, states, training, choices, mode)
        return hidden, new_states

    def _forward(
        self,
        inputs: Any,
        states: States,
        training: bool = False,
        choices: Sequence[int | None] | None = None,
        mode: str | None = None,
    ) -> tuple[Any, States, list[Any]]:
        """`forward`, also returning log pi of each path drawn (sampled-path search)."""
        if choices is None:
            choices = [None] * len(self.blocks)
        self._check_choices(choices)
        inputs = ops.cast(ops.convert_to_tensor(inputs), "int32")
        mask = ops.not_equal(inputs, 0)  # [B, T]
        states, position = self._split_position_state(states)
        x = self.embedding(inputs)  # [B, T, D]
        x = x * ops.cast(math.sqrt(self.config.d_model), x.dtype)
        if position is not None:
            positions, position = stream_positions(position, mask)
            x = self._add_positions(x, positions)
        x = self.input_dropout(x, training=training)
        # In training, a sampled-path search runs one candidate per block, drawn from pi,
        # unless the call asks for other block weights.
        sampled = training and mode is None and self.search_baseline is not None
        # Only mixed blocks read the temperature.
        tau = self.tau() if None in choices and not sampled else None
        new_states, log_probs = [], []
        for block, block_states, choice in zip(self.blocks, states, choices, strict=True):
            if choice is None and sampled and block.arch_logits is not None:
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

    def _check_choices(self, choices: Sequence[int | None]) -> None:
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

    def call(self, inputs: Any, training: bool | None = None, mode: str | None = None) -> Any:
        training = bool(training)
        inputs = ops.convert_to_tensor(inputs)
        batch = inputs.shape[0]
        if self.state_variables and batch is not None and batch != self.config.batch_size:
            raise ValueError(
                f"got a batch of {batch} rows but the memory holds config.batch_size="
                f"{self.config.batch_size}; batch with drop_remainder=True, or use "
                "model.forward(inputs, model.initial_state(batch)) for other sizes."
            )
        which = "train" if training else "eval"
        hidden, new_states, log_probs = self._forward(
            inputs, self._read_states(which), training=training, mode=mode
        )
        self._write_states(which, new_states)
        if training:
            self.step.assign_add(1)
        if log_probs:
            # The drawn path's log pi is part of the output, not kept on the model, so
            # compute_loss reads the values of the very call it scores.
            return {"hidden": hidden, "path_log_probs": log_probs}
        return hidden

    # ----------------------------------------------------------------- output
    def _tied_kernel(self) -> Any | None:
        return self.embedding.embeddings if self.config.tie_embeddings else None

    def token_nll(self, hidden: Any, targets: Any) -> Any:
        """float32 [B, T] -log p(target); 0 where target == 0. No [B, T, V] logits."""
        return self.output_layer.token_nll(hidden, targets, tied_kernel=self._tied_kernel())

    def log_probs(self, hidden: Any) -> Any:
        """float32 [B, T, V] exact log-probabilities of every token."""
        return self.output_layer.log_probs(hidden, tied_kernel=self._tied_kernel())

    def compute_loss(
        self,
        x: Any = None,
        y: Any = None,
        y_pred: Any = None,
        sample_weight: Any = None,
        training: bool = True,
    ) -> Any:
        """Mean NLL over non-pad targets, plus any losses added by layers, plus the
        search's terms: the expected cost (`search_cost_weight`) and, for a sampled-path
        search, the score-function term that trains the architecture logits.

        Args:
            y_pred: what `call` returned: the hidden states, or in training of a
                sampled-path search the dict that also holds the drawn path's log pi.
        """
        hidden, path_log_probs = split_outputs(y_pred)
        # Token-weighted over the global batch under a tf.distribute strategy.
        data_loss, replicas = mean_token_loss(self.token_nll(hidden, y), y, sample_weight)
        loss = add_layer_losses(data_loss, self.losses, replicas)
        if self.config.search_cost_weight and self.config.is_stochastic:
            seq_len = int(y.shape[1])
            megaflops = expected_flops(self, seq_len) / 1e6
            loss = loss + self.config.search_cost_weight * megaflops / replicas
        if training and path_log_probs:
            loss = loss + score_function_term(path_log_probs, self.search_baseline, data_loss)
        return loss

    @property
    def loss_attentions(self) -> list[Any]:
        """The attention layers that add a loss of their own to the training loss
        (`Attention.adds_loss`, e.g. Primal's KSVD term with eta > 0)."""
        return [
            layer for block in self.blocks for _, layer in block.attentions() if layer.adds_loss()
        ]

    @property
    def primal_attentions(self) -> list[Any]:
        """Deprecated: `loss_attentions` (every attention that adds a loss, not only
        Primal's)."""
        warnings.warn(
            "PARTransformerXL.primal_attentions is deprecated; use loss_attentions.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.loss_attentions

    def compute_metrics(
        self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None
    ) -> dict[str, Any]:
        """Keras's metrics, plus each attention loss under its name (`Attention.loss_name`:
        `ksvd_loss` for Primal): the sum of those layers' terms in this step's loss
        (already part of `loss`), so the logs (fit's `logs["ksvd_loss"]`, what TensorBoard
        can plot on its own) show it.

        The terms are the layers' losses of this step's call, read on the TensorFlow
        backend, where the call, `compute_loss` and this run in one traced step; on JAX
        the call runs inside a gradient transformation that the values cannot leave, so
        the logs hold no such loss there.
        """
        hidden, _ = split_outputs(y_pred)
        results = super().compute_metrics(x, y, hidden, sample_weight=sample_weight)
        if keras.backend.backend() == "tensorflow":
            results = {**results, **attention_loss_logs(self.loss_attentions)}
        return results

    # ----------------------------------------------------------- architecture
    def _fixed_architecture(self) -> str | None:
        return self.config.architecture

    def _search_candidates(self) -> Sequence[str]:
        return self.config.candidates

    # ---------------------------------------------------------- serialization
    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "config": self.config.to_dict(),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PARTransformerXL:
        config = dict(config)
        model_config = ModelConfig.from_dict(config.pop("config"))
        if "dtype" in config and isinstance(config["dtype"], dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(model_config, **config)


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
