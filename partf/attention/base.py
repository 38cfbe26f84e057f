"""The one interface every partf attention implements.

    y, new_state = layer(x, state=state, mask=mask, training=training)

maps a segment `x` [B, T, D] and a carried `state` to an output [B, T, D] and the next
state. The state is a flat dict of tensors of fixed shapes and dtypes for a given batch
size (`state_spec`), so a model keeps it in variables between batches, a generator
carries it between tokens and XLA sees static shapes; `get_initial_state` (all zeros)
means "no context yet" for every mechanism. `mask` (bool [B, T], True for real tokens)
keeps padding keys out.

The base class owns the query, key, value and output projections, the heads and the
state protocol. A variant overrides `attend` (per-head tensors [B, T, H, Dh]), or `call`
when its state is not made of projected keys and values (relative attention caches the
layer input, as Transformer-XL does).
"""

from __future__ import annotations

import inspect
import math
from typing import Any, ClassVar

import keras
from keras import ops

from partf.attention.masking import valid_tokens
from partf.attention.positions import apply_rotary, stream_positions
from partf.random import Dropout
from partf.serialization import register

State = dict[str, Any]


def _matmul_plan(equation: str) -> tuple[int, int] | None:
    """(input axes contracted, kernel output axes) when `equation` is one matmul, else None.

    That is the case when the input's trailing axes are the kernel's leading axes, in
    order, and the output is the input's leading axes followed by the kernel's remaining
    axes: "btd,dhk->bthk", "bthk,hkd->btd", "ld,dhk->lhk".
    """
    if "..." in equation or "->" not in equation:
        return None
    inputs, output = equation.split("->")
    if inputs.count(",") != 1:
        return None
    x, kernel = inputs.split(",")
    contracted = [axis for axis in kernel if axis in x]
    kept = kernel[len(contracted) :]
    n_in = len(contracted)
    if (
        n_in == 0
        or kernel[:n_in] != "".join(contracted)
        or x[-n_in:] != kernel[:n_in]
        or output != x[:-n_in] + kept
    ):
        return None
    return n_in, len(kept)


@register
class Projection(keras.layers.EinsumDense):
    """`keras.layers.EinsumDense` computed as one 2-D matrix product where it can be.

    Same arguments, weights and results as `EinsumDense`. Equations that contract the
    input's trailing axes with the kernel's leading axes ("btd,dhk->bthk",
    "bthk,hkd->btd", "ld,dhk->lhk") run as a reshape, one [rows, in] x [in, out] matmul
    and a reshape. TensorFlow's einsum ran them as a broadcast batched matmul whose
    kernel gradient is a product per example summed afterwards: in the base PAR model's
    training step (TensorFlow, no XLA) the projections took about 2.5 times longer per
    FLOP than the feed-forward network's plain matmuls.
    """

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        plan = _matmul_plan(self.equation)
        if plan is None or self.lora_enabled or self.quantization_mode:
            return super().call(inputs, training=training)
        n_in, _ = plan
        kernel_shape = tuple(self.kernel.shape)
        size_in = math.prod(kernel_shape[:n_in])
        size_out = math.prod(kernel_shape[n_in:])
        lead = tuple(ops.shape(inputs)[: len(inputs.shape) - n_in])
        rows = ops.reshape(inputs, (-1, size_in))  # [rows, in]
        y = ops.matmul(rows, ops.reshape(self.kernel, (size_in, size_out)))  # [rows, out]
        y = ops.reshape(y, (*lead, *kernel_shape[n_in:]))
        if self.bias is not None:
            y = ops.add(y, self.bias)
        if self.activation is not None:
            y = self.activation(y)
        return y


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raises ValueError naming the choices when `value` is not one of them."""
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}.")


def constructor_default(cls: type, name: str) -> Any:
    """The default of constructor argument `name` of `cls`, from the first class in its
    method resolution order whose own `__init__` declares it (TypeError if none does)."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        parameter = inspect.signature(init).parameters.get(name)
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            return parameter.default
    raise TypeError(f"{cls.__name__} lists option {name!r} but no constructor declares it.")


class Attention(keras.layers.Layer):
    """Base class for causal (and non-causal) multi-head attentions.

    Args:
        d_model: width D of the input and output.
        num_heads: number of heads H.
        head_dim: width Dh of each head; defaults to `d_model // num_heads`.
        dropout_rate: dropout on attention weights (where the mechanism has them) and
            on the output.
        causal: whether position t may only see positions <= t; False (an encoder)
            needs `supports_noncausal`.
        use_bias: whether the projections have biases.
        rotary: rotary position embedding (RoPE) of queries and keys by each token's
            absolute stream position (`partf.attention.positions`), carried in the state
            ("position", int32 [B]); needs `supports_rotary`."""

    #: Whether the mechanism supports `causal=True`.
    supports_causal: ClassVar[bool] = True
    #: Whether the mechanism has a non-causal form (`causal=False`): one whole sequence
    #: per call, padded keys excluded, no carried context.
    supports_noncausal: ClassVar[bool] = True
    #: Why a mechanism has no non-causal form, and what to use instead (one line).
    noncausal_help: ClassVar[str] = "choose another attention for a bidirectional model."
    #: Mechanism options exposed on the command line as `--attn_<name>`: constructor
    #: argument name -> one-line help. Each subclass declares its own.
    option_help: ClassVar[dict[str, str]] = {}
    #: option -> (default, help), built when the class is defined: the default is read
    #: from the constructor's signature, so it is written in one place only.
    options: ClassVar[dict[str, tuple[Any, str]]] = {}
    #: Whether the mechanism reads values; False builds no value projection
    #: (such a mechanism overrides `call`).
    uses_values: ClassVar[bool] = True
    #: Whether rotary positions are defined for the mechanism: it scores queries
    #: against keys by a dot product, which rotation makes depend on relative position.
    supports_rotary: ClassVar[bool] = False
    #: Whether the mechanism encodes positions itself (relative attention); asked for
    #: rotary positions inside a model, it keeps its own encoding (`create_attention`).
    encodes_positions: ClassVar[bool] = False
    #: Where rotation happens: True rotates the projected queries and keys before
    #: `attend`; False leaves it to `attend` (linear attentions rotate their features).
    rotates_projections: ClassVar[bool] = True
    #: Keyword arguments `call` passes to `attend` besides the segment and state: a
    #: mechanism whose `attend` has a layout option the layer always uses names it here
    #: (the window grids give padding no place: {"skip_pads": True}).
    call_attend_options: ClassVar[dict[str, Any]] = {}
    #: The name the training logs give the loss the mechanism adds to the model's loss
    #: with `add_loss` (Primal's KSVD term: "ksvd_loss"); None: it adds none. A
    #: mechanism that declares one makes `adds_loss` true (or overrides it).
    loss_name: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.options = {
            name: (constructor_default(cls, name), help_text)
            for name, help_text in cls.option_help.items()
        }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        head_dim: int | None = None,
        dropout_rate: float = 0.0,
        causal: bool = True,
        use_bias: bool = False,
        rotary: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if d_model <= 0 or num_heads <= 0:
            raise ValueError(
                f"d_model and num_heads must be positive, got d_model={d_model}, "
                f"num_heads={num_heads}."
            )
        if head_dim is None:
            if d_model % num_heads:
                raise ValueError(
                    f"d_model={d_model} is not divisible by num_heads={num_heads}; "
                    "choose num_heads dividing d_model or pass head_dim."
                )
            head_dim = d_model // num_heads
        if causal and not self.supports_causal:
            raise ValueError(
                f"{type(self).__name__} is non-causal only and cannot be used in a "
                "causal (language-modelling) model; choose another attention."
            )
        if not causal and not self.supports_noncausal:
            raise ValueError(
                f"{type(self).__name__} has no non-causal form (causal=False); "
                + self.noncausal_help
            )
        if rotary and not self.supports_rotary:
            raise ValueError(
                f"rotary positions are not defined for {type(self).__name__}: it has no "
                "query-key dot product to rotate; use position 'sinusoidal', 'learned' or "
                "'none' with it."
            )
        if rotary and head_dim % 2:
            raise ValueError(
                f"rotary positions rotate pairs of features, so head_dim must be even, got "
                f"{head_dim}; choose num_heads so that d_model / num_heads is even."
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dropout_rate = dropout_rate
        self.causal = causal
        self.use_bias = use_bias
        self.rotary = bool(rotary)
        # `mask` is our own padding argument, not Keras mask propagation;
        # accepting it avoids Keras' "destroys the mask" warning on every call.
        self.supports_masking = True
        # Keras would cast every floating call argument to the compute dtype,
        # the state included; the state must reach `call` in float32 under
        # mixed precision, so `__call__` and `call` convert `x` themselves.
        self._convert_input_args = False

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> None:
        return None

    # ----------------------------------------------------------------- build
    def build(self, input_shape: tuple[int | None, ...]) -> None:
        heads = (None, self.num_heads, self.head_dim)
        bias = "hk" if self.use_bias else None
        self.query_dense = self._projection("query", "btd,dhk->bthk", heads, input_shape, bias)
        self.key_dense = self._projection("key", "btd,dhk->bthk", heads, input_shape, bias)
        if self.uses_values:
            self.value_dense = self._projection("value", "btd,dhk->bthk", heads, input_shape, bias)
        out_bias = "d" if self.use_bias else None
        self.output_dense = self._projection(
            "output", "bthk,hkd->btd", (None, self.d_model), (None, *heads), out_bias
        )
        self.dropout = Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.built = True

    def _projection(
        self, name: str, equation: str, output_shape: tuple, input_shape: tuple, bias_axes=None
    ) -> Projection:
        """A `Projection` in the layer's dtype policy, built for `input_shape`."""
        layer = Projection(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes,
            dtype=self.dtype_policy,
            name=name,
        )
        layer.build(input_shape)
        return layer

    # ----------------------------------------------------------------- state
    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        """Name -> (shape, dtype) of each state tensor; empty for stateless ones."""
        return {}

    def position_state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        """The state entry of rotary positions: "position" int32 [B], the real tokens
        of the stream read so far ({} without rotary). Each `state_spec` adds it."""
        return {"position": ((batch_size,), "int32")} if self.rotary else {}

    def token_positions(self, state: State, mask: Any | None, batch: Any, length: Any) -> Any:
        """int32 [B, T]: each token's absolute position in its stream (rotary only)."""
        valid = valid_tokens(mask, batch, length)
        return stream_positions(state["position"], valid)[0]

    def advance_positions(self, state: State, mask: Any | None, batch: Any, length: Any) -> State:
        """The "position" entry after this segment ({} without rotary)."""
        if not self.rotary:
            return {}
        valid = valid_tokens(mask, batch, length)
        return {"position": stream_positions(state["position"], valid)[1]}

    def get_initial_state(self, batch_size: int) -> State:
        """The empty state: zeros of `state_spec`, meaning "no context yet"."""
        return {
            name: ops.zeros(shape, dtype=dtype)
            for name, (shape, dtype) in self.state_spec(batch_size).items()
        }

    # ------------------------------------------------------------------ cost
    def adds_loss(self) -> bool:
        """Whether this layer adds a loss of its own (`add_loss`) to the training loss,
        which the model then reports in its logs as `loss_name`. True when the class
        names a loss; a mechanism whose loss can be switched off overrides it."""
        return self.loss_name is not None

    def flops_per_token(self, seq_len: int, batch_size: int = 1) -> float:
        """Forward FLOPs per token (2 per multiply-add, matrix products only) when the
        layer reads segments of `seq_len` tokens, `batch_size` rows at a time.

        The query, key, value and output projections plus `mechanism_flops`; what the
        cost-aware PAR search charges for choosing this layer (partf.models.cost).
        """
        projections = 3 + int(self.uses_values)
        width = self.num_heads * self.head_dim
        return 2.0 * projections * self.d_model * width + self.mechanism_flops(seq_len, batch_size)

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        """Forward FLOPs per token of the attention itself, beyond the projections, as
        the layer computes it (masked entries included)."""
        raise NotImplementedError(f"{type(self).__name__} does not count its FLOPs.")

    # ------------------------------------------------------------------ call
    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(x, keras.KerasTensor):
            x = ops.convert_to_tensor(x)
        return super().__call__(x, *args, **kwargs)

    def call(
        self,
        x: Any,
        state: State | None = None,
        mask: Any | None = None,
        training: bool | None = None,
    ) -> tuple[Any, State]:
        """x [B, T, D], the previous segment's state (None: empty), an optional bool mask
        [B, T] (True for real tokens) -> (y [B, T, D], new_state)."""
        x = ops.cast(x, self.compute_dtype)
        if state is None:
            state = self.get_initial_state(ops.shape(x)[0])
        q = self.query_dense(x)  # [B, T, H, Dh]
        k = self.key_dense(x)
        v = self.value_dense(x)
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        if self.rotary and self.rotates_projections:
            positions = self.token_positions(state, mask, batch, length)
            q, k = apply_rotary(q, positions), apply_rotary(k, positions)
        out, new_state = self.attend(
            q, k, v, state, mask=mask, training=training, **self.call_attend_options
        )
        new_state = {**new_state, **self.advance_positions(state, mask, batch, length)}
        y = self.output_dense(out)  # [B, T, D]
        return self.dropout(y, training=training), new_state

    def attend(
        self,
        q: Any,
        k: Any,
        v: Any,
        state: State,
        mask: Any | None = None,
        training: bool | None = None,
    ) -> tuple[Any, State]:
        """The mechanism itself: per-head q, k, v [B, T, H, Dh] -> ([B, T, H, Dh], state)."""
        raise NotImplementedError

    def compute_output_spec(self, x, state=None, mask=None, training=None):
        # The state keeps its spec; the output has the input's shape.
        out = keras.KerasTensor(x.shape, dtype=self.compute_dtype)
        spec = {
            name: keras.KerasTensor(shape, dtype=dtype)
            for name, (shape, dtype) in self.state_spec(x.shape[0] or 1).items()
        }
        return out, spec

    def get_config(self) -> dict[str, Any]:
        # A mechanism's own arguments are its options (kept as attributes of the same
        # names) and, for the random-feature ones, `seed`: saved here once for all.
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            dropout_rate=self.dropout_rate,
            causal=self.causal,
            use_bias=self.use_bias,
            rotary=self.rotary,
        )
        config.update({name: getattr(self, name) for name in self.options})
        if "seed" in inspect.signature(type(self).__init__).parameters:
            config["seed"] = self.seed
        return config
