"""PARTransformerXL: the Pay-Attention-when-Required Transformer-XL language model
(docs/model.md).

A causal `Backbone` gives hidden states and an adaptive softmax on them the token
distribution (`log_probs`) and the loss (`token_nll`, `compute_loss`). The XL memory of
every block lives in non-trainable variables sized for the fixed context batch, like a
stateful RNN, so compiled `fit` and `evaluate` carry context across batches without
help; training and evaluation have separate memories, so evaluating never disturbs the
training context. Absolute positions ("sinusoidal", "learned") are added to the
embeddings from the count carried in block 0's states; "rotary" attentions carry their
own.

References:
    Mandava et al., "Pay Attention when Required", 2020. https://arxiv.org/abs/2009.04534
    Dai et al., "Transformer-XL", ACL 2019. https://arxiv.org/abs/1901.02860
    Grave et al., "Efficient softmax approximation for GPUs", ICML 2017.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from partf.layers.adaptive_softmax import AdaptiveSoftmax
from partf.models.backbone import Backbone, BackboneOwner, States
from partf.models.config import ModelConfig, is_searched_architecture
from partf.models.cost import expected_cost
from partf.models.loss import (
    add_layer_losses,
    attention_loss_logs,
    mean_token_loss,
    score_function_term,
    split_outputs,
)
from partf.models.search_interface import SearchInterface
from partf.models.train_step import TrainStep
from partf.serialization import register

__all__ = ["STATE_SETS", "PARTransformerXL", "States"]

#: The state sets: one copy of the memory for training calls, one for evaluation.
STATE_SETS = ("train", "eval")


@register
class PARTransformerXL(TrainStep, SearchInterface, BackboneOwner, keras.Model):
    """PAR Transformer-XL language model, from a `ModelConfig` (or its dict) whose fields
    keyword arguments may override; other keyword arguments (name, dtype) go to
    `keras.Model`.

    A call takes int [B, T] ids (0 = padding; B = `config.batch_size` when the model has
    memory). training=True uses and updates the training memory, samples the block
    weights and increments `step`; False uses the evaluation memory and `eval_mode`
    weights; `mode` overrides the weights as in `forward`. It returns the hidden states
    [B, T, d_model], or in training of a sampled-path search {"hidden", "path_log_probs"}
    (`split_outputs` takes them apart). `compile` and the step: partf.models.train_step.

    Example:
        >>> model = PARTransformerXL(vocab_size=100, d_model=16, num_heads=2, d_ffn=32,
        ...                          num_layers=2, mem_len=4, cutoffs=(20,), batch_size=2)
        >>> model.compile(optimizer="adam")
        >>> history = model.fit(x, x, epochs=1, verbose=0)  # loss from compute_loss"""

    def __init__(self, config: ModelConfig | dict[str, Any] | None = None, **kwargs: Any) -> None:
        config = ModelConfig.of(config, kwargs)
        if not config.causal:
            raise ValueError(
                "PARTransformerXL is the causal model; causal=False is the bidirectional "
                "Encoder's (partf.models.Encoder, MaskedLanguageModel)."
            )
        super().__init__(**kwargs)
        self.config = config
        policy = self.dtype_policy
        self.backbone = Backbone(config, dtype=policy, name="backbone")
        self.temperature = self._make_temperature(config)
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
        self._add_block_states()
        # The sampled-path search's loss baseline (`score_function_term`); only it has one.
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
        self._add_position_states()
        # Everything is known from the config: build now, so a loaded model
        # has all its variables before the weights are restored.
        self.build((config.batch_size, None))

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        if self.built:
            return
        self.backbone.build(input_shape)
        self.output_layer.build((*input_shape, self.config.d_model))

    # -------------------------------------------------------------- XL memory
    def _add_block_states(self) -> None:
        """Makes one copy of every block's state (`state_spec`: its candidates' XL memory
        or running sums) per set of `STATE_SETS`: [set][block][candidate][name]."""
        self._states: dict[str, States] = {}
        for which in STATE_SETS:
            self._states[which] = [
                [
                    {
                        name: self._add_state_variable(
                            f"{which}_state_{b}_{c}_{name}", shape, dtype
                        )
                        for name, (shape, dtype) in spec.items()
                    }
                    for c, spec in enumerate(block.state_spec(self.config.batch_size))
                ]
                for b, block in enumerate(self.blocks)
            ]

    def _add_position_states(self) -> None:
        """With absolute positions, makes the stream position reached, per row and set."""
        self._position_vars: dict[str, keras.Variable] = {}
        if self.config.absolute_positions:
            for which in STATE_SETS:
                self._position_vars[which] = self._add_state_variable(
                    f"{which}_state_position", (self.config.batch_size,), "int32"
                )

    def _add_state_variable(self, name: str, shape: tuple[int, ...], dtype: str) -> keras.Variable:
        """One memory variable, zero-initialised.

        `synchronization="on_read"` makes it per replica under a `tf.distribute`
        strategy: each replica reads and writes its own copy, so the memory of
        replica k continues the streams (rows) that replica k receives. With no
        strategy (or another backend) it is an ordinary variable.
        """
        with keras.name_scope(self.name, caller=self):
            variable = keras.Variable(
                initializer="zeros",
                shape=shape,
                dtype=dtype,
                trainable=False,
                autocast=False,
                synchronization="on_read",
                # Read across replicas (e.g. by model.save), the first replica's copy.
                aggregation="only_first_replica",
                name=name,
            )
        self._track_variable(variable)
        return variable

    @property
    def state_variables(self) -> list[keras.Variable]:
        """All memory variables, training set then evaluation set."""
        return [var for which in STATE_SETS for var in self._state_vars(which)]

    def _state_vars(self, which: str) -> list[keras.Variable]:
        blocks = [var for block in self._states[which] for cand in block for var in cand.values()]
        position = [self._position_vars[which]] if which in self._position_vars else []
        return blocks + position

    def initial_state(self, batch_size: int) -> States:
        """The backbone's `initial_state`: empty states ("no context") for `forward`."""
        return self.backbone.initial_state(batch_size)

    def reset_state(self, which: str = "all") -> None:
        """Empties the memory: which = "all", "train" or "eval"."""
        if which not in ("all", *STATE_SETS):
            raise ValueError(f"reset_state(which={which!r}): use 'all', 'train' or 'eval'.")
        for name in STATE_SETS if which == "all" else (which,):
            for var in self._state_vars(name):
                var.assign(ops.zeros(var.shape, var.dtype))

    def _read_states(self, which: str) -> States:
        states = [
            [{name: var.value for name, var in cand.items()} for cand in block]
            for block in self._states[which]
        ]
        if which in self._position_vars:
            states[0] = [*states[0], {"position": self._position_vars[which].value}]
        return states

    def _write_states(self, which: str, states: States) -> None:
        states, position = self.backbone.split_position_state(states)
        if position is not None:
            self._position_vars[which].assign(ops.cast(position, "int32"))
        for block_vars, block_states in zip(self._states[which], states, strict=True):
            for cand_vars, cand_states in zip(block_vars, block_states, strict=True):
                for name, var in cand_vars.items():
                    var.assign(ops.cast(cand_states[name], var.dtype))

    # ---------------------------------------------------------------- forward
    def forward(
        self,
        inputs: Any,
        states: States,
        training: bool = False,
        choices: Sequence[int | None] | None = None,
        mode: str | None = None,
    ) -> tuple[Any, States]:
        """Pure forward pass, writing no variable, of token ids int [B, T] (0 = padding) from
        `states` (`initial_state(B)` or a previous `forward`'s): (hidden [B, T, d_model],
        new states). `training`: dropout and sampled block weights (a sampled-path search
        draws one candidate per block from pi). `choices`: per block, the index of the
        candidate to run alone (the others carry their states unchanged), or None for the
        whole block; with each block's argmax candidate the hidden states equal the full
        pass's, so generation skips candidates that weigh zero. `mode`: the mixed blocks'
        weights, "argmax", "expected" or "sample" (None: sampled in training, `eval_mode`
        otherwise), an argument so that a compiled function keeps the weights it was
        traced with."""
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
        choices = self.backbone.resolve_choices(choices)
        # In training, a sampled-path search runs one candidate per block, drawn from pi,
        # unless the call asks for other block weights.
        sampled = training and mode is None and self.search_baseline is not None
        # Only mixed blocks read the temperature.
        tau = self.tau() if None in choices and not sampled else None
        return self.backbone.forward(
            inputs,
            states,
            tau=tau,
            training=training,
            choices=choices,
            mode=mode,
            sample_paths=sampled,
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
        search, the score-function term that trains the architecture logits (from the
        drawn path's log pi in `y_pred`, what `call` returned)."""
        hidden, path_log_probs = split_outputs(y_pred)
        # Token-weighted over the global batch under a tf.distribute strategy.
        data_loss, replicas = mean_token_loss(self.token_nll(hidden, y), y, sample_weight)
        loss = add_layer_losses(data_loss, self.losses, replicas)
        if self.config.search_cost_weight and self.config.is_stochastic:
            seq_len = int(y.shape[1])
            cost = expected_cost(self, seq_len)  # MFLOPs or measured dense blocks per token
            loss = loss + self.config.search_cost_weight * cost / replicas
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

    def compute_metrics(
        self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None
    ) -> dict[str, Any]:
        """Keras's metrics, plus each attention loss under its name (`Attention.loss_name`,
        e.g. `ksvd_loss`; already part of `loss`), read on TensorFlow only: on JAX the call
        runs inside a gradient transformation that the values cannot leave."""
        hidden, _ = split_outputs(y_pred)
        results = super().compute_metrics(x, y, hidden, sample_weight=sample_weight)
        if keras.backend.backend() == "tensorflow":
            results = {**results, **attention_loss_logs(self.loss_attentions)}
        return results

    # ----------------------------------------------------------- architecture
    def _fixed_architecture(self) -> str | None:
        architecture = self.config.architecture
        return None if is_searched_architecture(architecture) else architecture

    def _search_candidates(self) -> Sequence[str]:
        return self.config.search_candidates
