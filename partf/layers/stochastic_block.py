"""PAR stochastic block: a learned, Gumbel-softmax-weighted choice of sublayer
(docs/model.md).

Each block holds candidate sublayers (by default attention, a feed-forward network
"dense" and the identity), each with its own residual connection and LayerNorm, as the
original project. The output is the candidates' outputs weighted by a Gumbel-softmax
sample of pi = softmax(logits) at temperature tau in training, and at evaluation by the
argmax of pi (default), pi itself ("expected") or a sample ("sample", the original's).
Every candidate runs at every step, so each stateful candidate's memory is updated
whatever its weight. A search can instead train on sampled paths (`run_sampled`): one
candidate per block, drawn from pi, computes the output, the others only their carried
state, and the logits learn from a score-function estimate.

Reference: Mandava et al., "Pay Attention when Required", 2020,
https://arxiv.org/abs/2009.04534
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from partf.attention import Attention, create_attention, get_attention_class
from partf.attention.base import check_choice
from partf.layers.candidates import (
    ARCH_PARAMETERIZATIONS,
    PROBABILITY_EPSILON,
    candidate_kind,
    check_eval_mode,
    initial_probabilities,
    noncausal_attention_names,
)
from partf.layers.feed_forward import FeedForward
from partf.layers.gumbel import gumbel_noise, gumbel_softmax
from partf.random import keyed_draws
from partf.serialization import check_complete, register
from partf.settings import setting, unknown_choice


@dataclasses.dataclass(frozen=True)
class BlockSettings:
    """What every block of a stack shares: the first fields of `ModelConfig`, which extends
    this class, so each is declared once, here, with its default and its partf-train help
    (`setting`); a model passes its own on (`ModelConfig.block_settings`), and a block adds
    its candidates and seed. `attention_options` are extra constructor options of the
    attentions (each mechanism takes those it knows); `causal=False` builds them
    non-causal (every real token sees the whole sequence; no memory)."""

    d_model: int = setting(128, "embedding and hidden width")
    num_heads: int = setting(4, "attention heads")
    d_ffn: int = setting(512, "feed-forward inner width")
    mem_len: int = setting(16, "XL memory length per block (0: no memory)")
    dropout_rate: float = setting(0.1, "dropout rate (embeddings, attention, dense outputs)")
    straight_through: bool = setting(
        False, "straight-through Gumbel-softmax (one-hot block weights forward, soft gradients)"
    )
    clamp_len: int | None = setting(None, "largest relative distance encoded (unset: no clamp)")
    attention: str = setting("relative", "attention mechanism of the 'attention' candidate")
    attention_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    eval_mode: str = setting("argmax", "block weights at evaluation: argmax, expected or sample")
    sample_per_example: bool = setting(False, "one Gumbel sample per example, not per step")
    arch_parameterization: str = setting(
        "logits",
        "architecture parameters: logits (pi = their softmax) or probabilities (the original "
        "project's clipped, unnormalised probabilities from [0.33, 0.33, 0.34], read as "
        "log(max(p, 0) + 1e-5))",
        choices=ARCH_PARAMETERIZATIONS,
    )
    # False: the bidirectional encoder of objective mlm (partf.models.Encoder), which sees
    # whole sequences; `ModelConfig` then records no XL memory and no adaptive softmax.
    causal: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "attention_options", dict(self.attention_options or {}))
        if not self.causal and self.mem_len:
            raise ValueError(
                f"a non-causal block sees its whole sequence and keeps no memory, got "
                f"mem_len={self.mem_len}; set mem_len=0."
            )
        check_eval_mode(self.eval_mode)
        # Every setting declared with choices, a ModelConfig's too.
        wrong = unknown_choice(self)
        if wrong is not None:
            check_choice(*wrong)


@register
class StochasticBlock(keras.layers.Layer):
    """A PAR block: candidates mixed by Gumbel-softmax weights; with a single candidate
    it is fixed (no architecture logits).

    Args:
        settings: what the stack's blocks share (`BlockSettings`), or its dict.
        candidates: names, each "attention" (the `settings.attention` type), "dense",
            "identity" or an attention registry name; several may be mixed.
        seed: seed of the block's Gumbel noise (a fixed non-causal block has no
            `seed_generator`).

    A call takes x [B, T, D], one state dict per candidate (or None), the temperature
    `tau` (needed when sampling), an optional bool mask [B, T] and `mode` ("argmax",
    "expected" or "sample"; None: "sample" in training, else `eval_mode`; an argument so
    that a compiled function keeps the weights it was traced with), and returns
    (y [B, T, D], new states). `kinds`, `sublayers` and `norms` hold, per candidate,
    ("attention", name) / ("dense", None) / ("identity", None), its layer and its
    LayerNormalization (None for the identity)."""

    def __init__(
        self,
        settings: BlockSettings | dict[str, Any],
        candidates: Sequence[str] = ("attention", "dense", "identity"),
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(settings, dict):
            settings = BlockSettings(**settings)
        if not candidates:
            raise ValueError("candidates is empty; give at least one, e.g. ('attention',).")
        self.settings = settings
        self.candidates = tuple(candidates)
        self.seed = seed
        self.causal = settings.causal
        self.eval_mode = settings.eval_mode
        # `mask` is the padding argument, not Keras mask propagation.
        self.supports_masking = True

        self.kinds = [candidate_kind(name, settings.attention) for name in self.candidates]
        if not self.causal:
            for name, (_, mechanism) in zip(self.candidates, self.kinds, strict=True):
                if mechanism is not None and not get_attention_class(mechanism).supports_noncausal:
                    raise ValueError(
                        f"candidate {name!r} ({mechanism} attention) is causal only and cannot "
                        f"be in a non-causal block; use dense, identity or one of "
                        f"{', '.join(noncausal_attention_names())}."
                    )
        # One entry per candidate in both lists: its sublayer (an attention or the
        # feed-forward network) and its LayerNorm, None for the identity. The names
        # `sublayers` and `norms` are where `.keras` files store these weights (a rename
        # is a new `partf.serialization.FORMAT_VERSION`); the sublayers are made candidate
        # by candidate, as their unseeded initializers draw their seeds when made, so a
        # model of a given seed keeps its starting weights.
        self.sublayers: list[keras.layers.Layer | None] = []
        self.norms: list[keras.layers.LayerNormalization | None] = []
        for index, (kind, mechanism) in enumerate(self.kinds):
            if kind == "identity":
                self.sublayers.append(None)
                self.norms.append(None)
                continue
            if kind == "dense":
                layer = FeedForward(
                    settings.d_model,
                    settings.d_ffn,
                    settings.dropout_rate,
                    dtype=self.dtype_policy,
                    name=f"dense_{index}",
                )
            else:
                options = {
                    **settings.attention_options,
                    "dropout_rate": settings.dropout_rate,
                    "mem_len": settings.mem_len,
                    "clamp_len": settings.clamp_len,
                    "dtype": self.dtype_policy,
                    "name": f"{mechanism}_{index}",
                }
                layer = create_attention(
                    mechanism, settings.d_model, settings.num_heads, causal=self.causal, **options
                )
            self.sublayers.append(layer)
            self.norms.append(
                keras.layers.LayerNormalization(
                    epsilon=1e-5, dtype=self.dtype_policy, name=f"norm_{index}"
                )
            )
        # A fixed block never draws: a non-causal one makes no generator (the encoder's
        # checkpoints list none), a causal one keeps the one its checkpoints list.
        self.seed_generator = None
        if len(self.candidates) > 1 or self.causal:
            self.seed_generator = keras.random.SeedGenerator(seed)
        self.arch_logits = None
        if self.num_candidates > 1:
            # "logits": zero logits, every candidate equally likely at the start.
            # "probabilities": the original's [0.33, 0.33, 0.34] (for three candidates).
            # The variable keeps the name "arch_logits" in both: the optimizer and
            # checkpoints find the architecture parameters by it.
            initializer = "zeros"
            if settings.arch_parameterization == "probabilities":
                initializer = keras.initializers.Constant(
                    initial_probabilities(self.num_candidates)
                )
            self.arch_logits = self.add_weight(
                name="arch_logits",
                shape=(self.num_candidates,),
                initializer=initializer,
                dtype="float32",
                autocast=False,
            )

    @property
    def num_candidates(self) -> int:
        return len(self.candidates)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        for layer, norm in zip(self.sublayers, self.norms, strict=True):
            if layer is not None:
                layer.build(input_shape)
                norm.build(input_shape)
        self.built = True

    # ----------------------------------------------------------- candidates
    def attentions(self) -> list[tuple[int, Attention]]:
        """(candidate index, attention layer) of every attention candidate, in order."""
        return [
            (index, self.sublayers[index])
            for index, (kind, _) in enumerate(self.kinds)
            if kind == "attention"
        ]

    def run_candidate(
        self,
        index: int,
        x: Any,
        state: dict[str, Any] | None = None,
        mask: Any | None = None,
        training: bool | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Candidate `index` alone, with its residual and LayerNorm: (y [B, T, D], its new
        state, {} if it keeps none). It equals the block's output when its weight is one."""
        kind, _ = self.kinds[index]
        if kind == "identity":
            return x, {}
        layer, norm = self.sublayers[index], self.norms[index]
        if kind == "dense":
            return norm(x + layer(x, training=training)), {}
        y, new_state = layer(x, state=state or None, mask=mask, training=training)
        return norm(x + y), new_state

    def candidate_flops(self, seq_len: int, batch_size: int = 1) -> list[float]:
        """Forward FLOPs per token of each candidate for segments of `seq_len` tokens
        (0 for the identity): the cost the cost-aware search charges."""
        return [
            0.0 if layer is None else float(layer.flops_per_token(seq_len, batch_size))
            for layer in self.sublayers
        ]

    # ------------------------------------------------------------ sampled path
    def sample_index(self) -> Any:
        """One candidate drawn from pi = softmax(logits) (Gumbel-max): int32 scalar."""
        logits = self.logits()
        noise = gumbel_noise(tuple(logits.shape), self.seed_generator)
        return ops.cast(ops.argmax(logits + noise), "int32")

    def log_pi(self, index: Any) -> Any:
        """float32 scalar log pi[index], differentiable in the logits."""
        return ops.take(ops.log_softmax(self.logits()), index)

    def run_sampled(
        self,
        index: Any,
        x: Any,
        states: list[dict[str, Any]] | None = None,
        mask: Any | None = None,
        training: bool | None = None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        """The block with only candidate `index` (an int32 scalar) computing its output, as a
        `keras.ops.switch`, so only its work is done, forward and backward. Every stateful
        candidate still returns its next state (only the state's own inputs are computed;
        for relative attention that is the block input itself). Returns (y, new states)."""
        if states is None:
            states = [{} for _ in self.candidates]
        new_states = [
            self.run_candidate(i, x, states[i], mask, training)[1] if kind == "attention" else {}
            for i, (kind, _) in enumerate(self.kinds)
        ]
        if self.num_candidates == 1:
            return self.run_candidate(0, x, states[0], mask, training)[0], new_states

        # A JAX branch cannot advance a seed generator (an assignment inside the
        # conditional's trace): there the candidates' draws are keyed by one draw made
        # here, outside it (partf.random.keyed_draws); TensorFlow's draws advance as usual.
        key = None
        if keras.backend.backend() == "jax":
            key = ops.cast(self.seed_generator.next(), "uint32")[1]

        def branch(i: int):
            def run(x: Any) -> Any:
                with keyed_draws(key):
                    return self.run_candidate(i, x, states[i], mask, training)[0]

            return run

        branches = [branch(i) for i in range(self.num_candidates)]
        return ops.switch(ops.cast(index, "int32"), branches, x), new_states

    # ---------------------------------------------------------------- state
    def state_spec(self, batch_size: int) -> list[dict[str, tuple[tuple[int, ...], str]]]:
        """Per candidate: name -> (shape, dtype) of its state ({} if none)."""
        specs: list[dict[str, tuple[tuple[int, ...], str]]] = [{} for _ in self.candidates]
        for index, layer in self.attentions():
            specs[index] = layer.state_spec(batch_size)
        return specs

    def get_initial_state(self, batch_size: int) -> list[dict[str, Any]]:
        """Empty (all-zero) states, one dict per candidate."""
        return [
            {name: ops.zeros(shape, dtype) for name, (shape, dtype) in spec.items()}
            for spec in self.state_spec(batch_size)
        ]

    def inference_states(self, states: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`states` (one dict per candidate) with each attention's inference cache added where
        it keeps one (`inference_state`), so one-token steps skip work."""
        states = list(states)
        for index, layer in self.attentions():
            if states[index] and hasattr(layer, "inference_state"):
                states[index] = layer.inference_state(states[index])
        return states

    # -------------------------------------------------------------- weights
    def logits(self) -> Any:
        """float32 [C]: the architecture logits that pi is the softmax of. With
        `arch_parameterization="probabilities"` the variable holds the original's
        unnormalised probabilities p and the logits are log(max(p, 0) + 1e-5), as its
        Gumbel-softmax computes them: a candidate whose p falls to zero or below is
        never drawn again and gets no gradient."""
        variable = ops.cast(ops.convert_to_tensor(self.arch_logits), "float32")
        if self.settings.arch_parameterization == "probabilities":
            return ops.log(ops.maximum(variable, 0.0) + PROBABILITY_EPSILON)
        return variable

    def pi(self) -> Any:
        """float32 [C]: softmax of the architecture logits (one-hot if fixed)."""
        if self.arch_logits is None:
            return ops.ones((1,), "float32")
        return ops.softmax(self.logits(), axis=-1)

    def weight_mode(self, training: bool | None = False, mode: str | None = None) -> str:
        """The block weights a call uses: `mode` if given (ValueError unless one of
        `EVAL_MODES`), else "sample" in training and the block's own `eval_mode` otherwise."""
        if mode is not None:
            check_eval_mode(mode)
            return mode
        return "sample" if training else self.eval_mode

    def mixing_weights(
        self,
        tau: Any = None,
        batch_size: int | None = None,
        training: bool = False,
        mode: str | None = None,
    ) -> Any:
        """Candidate weights: float32 [C], or [B, C] when sampling per example; `mode` as
        in `weight_mode`."""
        logits = self.logits()
        mode = self.weight_mode(training, mode)
        if mode == "argmax":
            return ops.one_hot(ops.argmax(logits), self.num_candidates, dtype="float32")
        if mode == "expected":
            return ops.softmax(logits, axis=-1)
        if tau is None:
            raise ValueError("sampling the block weights needs tau; pass tau=.")
        sample_shape = (batch_size,) if self.settings.sample_per_example else ()
        straight_through = self.settings.straight_through
        return gumbel_softmax(logits, tau, self.seed_generator, straight_through, sample_shape)

    # ----------------------------------------------------------------- call
    def call(
        self,
        x: Any,
        states: list[dict[str, Any]] | None = None,
        tau: Any = None,
        mask: Any | None = None,
        training: bool | None = None,
        mode: str | None = None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        if states is None:
            states = [{} for _ in self.candidates]
        # Every candidate runs, whatever its weight, so each one's memory stays current.
        runs = [
            self.run_candidate(i, x, states[i], mask, training) for i in range(self.num_candidates)
        ]
        outputs, new_states = [y for y, _ in runs], [state for _, state in runs]
        if self.num_candidates == 1:
            return outputs[0], new_states

        weights = self.mixing_weights(tau, ops.shape(x)[0], bool(training), mode)
        weights = ops.cast(weights, x.dtype)
        per_example = len(weights.shape) == 2
        mixed = 0
        for c, out in enumerate(outputs):
            # [C] -> a scalar per candidate; [B, C] -> [B, 1, 1].
            w = weights[:, c, None, None] if per_example else weights[c]
            mixed = mixed + w * out
        # Renormalise by the weights' sum (1 up to rounding, so the value is unchanged).
        # The division matters to XLA on CPU: its fusion copies chains of cheap
        # element-wise ops into every consumer, and without a costly op at the block
        # output each block recomputed the element-wise work of all the blocks above it
        # (forward and backward; 2x the step time at 6 blocks). XLA never duplicates a
        # division, so the block output, and its gradient, are computed once.
        total = ops.sum(weights, axis=-1)
        return mixed / (total[:, None, None] if per_example else total), new_states

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> None:
        return None

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        settings = dataclasses.asdict(self.settings)
        config.update(settings=settings, candidates=list(self.candidates), seed=self.seed)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> StochasticBlock:
        """The saved block; a setting missing from it is refused, not defaulted (FormatError)."""
        check_complete(config["settings"], BlockSettings, f"the saved block {config['name']}")
        return super().from_config(config)
