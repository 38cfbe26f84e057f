"""Transformer-XL relative multi-head attention with segment memory (Dai et al. 2019,
section 3.3, https://arxiv.org/abs/1901.02860).

A query at position i scores a key at j with four terms, R a fixed sinusoid of the
distance i - j projected by a per-layer W_r:

    (a) q_i . k_j            content
    (b) q_i . W_r R_{i-j}    content-dependent position
    (c) u . k_j              global content bias
    (d) v . W_r R_{i-j}      global position bias

(a)+(c) is one product with (q + u); (b)+(d) one with (q + v) against every distance,
aligned by `relative_shift` instead of a gather. Keys and values are the segment's layer
input after a memory of the last `mem_len` inputs (no gradient), right-aligned; slots
that hold nothing yet are marked invalid and never attended.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from partf.attention.base import Attention, State, check_choice
from partf.attention.masking import masked_softmax
from partf.attention.registry import register_attention
from partf.random import Dropout


def sinusoidal_encoding(distances: Any, dim: int, dtype: str = "float32") -> Any:
    """Fixed sinusoidal encodings [L, dim] of positions or distances [L] (any sign): sin of
    each times the frequencies 1 / 10000^(2k/dim) in the first half, cos in the second
    (as Transformer-XL)."""
    half = (dim + 1) // 2
    inv_freq = 1.0 / (10000.0 ** (ops.arange(0, 2 * half, 2, dtype="float32") / dim))
    angles = ops.cast(distances, "float32")[:, None] * inv_freq[None, :]  # [L, half]
    encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
    return ops.cast(encoding[:, :dim], dtype)


def relative_shift(scores: Any, key_len: int) -> Any:
    """Aligns position scores from (query, distance) to (query, key) layout, [..., T, L] ->
    [..., T, K], with a flatten, a slice and a reshape (no gather).

    Column p of `scores` holds the score against distance `key_len - 1 - p`; queries are
    the last T of `key_len` positions; [i, j] of the result holds distance
    `(key_len - T + i) - j`. Every entry is valid for L >= key_len + T - 1; with
    L = key_len + 1 (causal: distances key_len - 1 down to -1) exactly those a causal
    mask keeps are."""
    shape = ops.shape(scores)
    lead, length_q, length_r = shape[:-2], shape[-2], shape[-1]
    flat = ops.reshape(scores, (*lead, length_q * length_r))
    # Row i of the result starts at flat offset i * L + (T - 1 - i), which is
    # (T - 1) + i * (L - 1): a row stride of L - 1 after dropping T - 1 entries.
    flat = flat[..., length_q - 1 : length_q - 1 + length_q * (length_r - 1)]
    skewed = ops.reshape(flat, (*lead, length_q, length_r - 1))
    return skewed[..., :key_len]


#: `RelativeAttention(compat=...)`: whose attention choices the layer follows.
COMPAT_MODES = ("transformer_xl", "original")


@register_attention("relative", position="none")
class RelativeAttention(Attention):
    """Transformer-XL multi-head attention with relative positions and memory.

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`
            (Transformer-XL's projections have no biases).
        mem_len: number M of past layer inputs kept as memory; 0 disables it.
        clamp_len: distances beyond this are treated as this distance; None keeps all.
        attention_dropout_rate: dropout on the attention weights (Transformer-XL's
            `dropatt`); 0 as the original PAR model: it costs a draw per (query, key).
        compat: "transformer_xl": scores / sqrt(Dh), linear output, as Dai et al.;
            "original": the original PAR project's scores / Dh, biases on every
            projection and a ReLU after the output projection.
        query_chunk: causal only: score this many queries at a time against only the
            keys they can see, so the masked part is not computed (same attention up to
            rounding); 0 scores all at once.

    State: {"memory": float32 [B, M, D], "memory_mask": int32 [B, M]}, the last M of
    [memory; x] (stop-gradient) and their validity; absent when `mem_len == 0`."""

    # Relative attention carries its own (relative sinusoidal) position encoding:
    # asked for rotary positions inside a model it keeps that encoding instead.
    encodes_positions = True
    option_help = {
        "mem_len": "memory length; the model sets it from --mem_len",
        "clamp_len": "largest relative distance encoded (None: no clamp)",
        "attention_dropout_rate": "dropout on the attention weights (dropatt)",
        "compat": "transformer_xl (scores / sqrt(Dh), linear output) or original (the "
        "original PAR project's scores / Dh, biases and ReLU output)",
        "query_chunk": "causal: score queries this many at a time against only the keys "
        "they can see (0: all at once; docs/speed.md measures 64 at 256 tokens)",
    }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        head_dim: int | None = None,
        dropout_rate: float = 0.0,
        causal: bool = True,
        use_bias: bool = False,
        mem_len: int = 0,
        clamp_len: int | None = None,
        attention_dropout_rate: float = 0.0,
        compat: str = "transformer_xl",
        query_chunk: int = 0,
        **kwargs: Any,
    ) -> None:
        check_choice("compat", compat, COMPAT_MODES)
        super().__init__(
            d_model=d_model,
            num_heads=num_heads,
            head_dim=head_dim,
            dropout_rate=dropout_rate,
            causal=causal,
            use_bias=use_bias or compat == "original",
            **kwargs,
        )
        self.compat = compat
        if mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {mem_len}.")
        if clamp_len is not None and clamp_len <= 0:
            raise ValueError(f"clamp_len must be positive or None, got {clamp_len}.")
        self.mem_len = int(mem_len)
        self.clamp_len = None if clamp_len is None else int(clamp_len)
        if not 0.0 <= attention_dropout_rate < 1.0:
            raise ValueError(
                f"attention_dropout_rate must be in [0, 1), got {attention_dropout_rate}."
            )
        self.attention_dropout_rate = float(attention_dropout_rate)
        if query_chunk < 0:
            raise ValueError(f"query_chunk must be >= 0 (0: one chunk), got {query_chunk}.")
        self.query_chunk = int(query_chunk)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        super().build(input_shape)
        # W_r: projects the d_model-wide sinusoid of each distance to the heads.
        heads = (self.num_heads, self.head_dim)
        self.position_dense = self._projection(
            "position", "ld,dhk->lhk", heads, (None, self.d_model)
        )
        self.attention_dropout = Dropout(
            self.attention_dropout_rate, dtype=self.dtype_policy, name="attention_dropout"
        )
        if self.compat == "original":
            self._original_initialization()
        self.content_bias = self.add_weight(
            name="content_bias", shape=heads, initializer="glorot_normal"
        )  # u
        self.position_bias = self.add_weight(
            name="position_bias", shape=heads, initializer="glorot_normal"
        )  # v
        self.built = True

    def _original_initialization(self) -> None:
        # The original's projections are plain Dense layers, initialised Glorot-uniform
        # over their 2-D kernels: queries, keys and values one [D, 3 * H * Dh] kernel,
        # positions and output [D, H * Dh] each. EinsumDense counts the fans of the 3-D
        # kernels here otherwise (about a third of the limit for the queries).
        width = self.num_heads * self.head_dim
        fans = {
            self.query_dense: self.d_model + 3 * width,
            self.key_dense: self.d_model + 3 * width,
            self.value_dense: self.d_model + 3 * width,
            self.position_dense: self.d_model + width,
            self.output_dense: self.d_model + width,
        }
        for layer, fan_sum in fans.items():
            limit = math.sqrt(6.0 / fan_sum)
            initializer = keras.initializers.RandomUniform(-limit, limit)
            layer.kernel.assign(initializer(layer.kernel.shape, layer.kernel.dtype))

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        if self.mem_len == 0:
            return {}
        return {
            "memory": ((batch_size, self.mem_len, self.d_model), "float32"),
            "memory_mask": ((batch_size, self.mem_len), "int32"),
        }

    def _distances(self, key_len: int, last: int) -> Any:
        # Column p of the position scores stands for distance key_len - 1 - p, down to
        # `last`: 0 causally (a zero column for -1 is padded later), -query_len
        # non-causally so every (query, key) pair has its distance.
        distances = ops.arange(key_len - 1, last - 1, -1, dtype="int32")
        if self.clamp_len is not None:
            distances = ops.clip(distances, -self.clamp_len, self.clamp_len)
        return distances

    # ------------------------------------------------------- inference cache
    def inference_state(self, state: State) -> State:
        """`state` plus a cache that makes one-token steps cheap (generation only): the
        memory's projected keys and values ("keys", "values" [B, M, H, Dh]) and the projected
        encodings of distances M .. 0 ("position" [M + 1, H, Dh]), so a one-token call
        projects only that token. Every call keeps the cache up to date; the result equals
        the uncached one up to rounding. {} stays {}."""
        state = {name: ops.convert_to_tensor(value) for name, value in state.items()}
        if self.mem_len == 0:
            return state
        memory = ops.cast(state["memory"], self.compute_dtype)
        return {
            **state,
            "keys": self.key_dense(memory),
            "values": self.value_dense(memory),
            "position": self._one_query_positions(),
        }

    def _one_query_positions(self) -> Any:
        """W_r R of the distances M .. 0: column j is the distance from a lone query
        after M memory rows to key j."""
        distances = self._distances(self.mem_len + 1, 0)
        encoding = sinusoidal_encoding(distances, self.d_model, self.compute_dtype)
        return self.position_dense(encoding)  # [M + 1, H, Dh]

    def _cached_step(self, x: Any, state: State, mask: Any, training: bool | None):
        """One query token against the cached memory keys and values."""
        mem_len = self.mem_len
        keys = ops.concatenate([ops.cast(state["keys"], x.dtype), self.key_dense(x)], axis=1)
        values = ops.concatenate([ops.cast(state["values"], x.dtype), self.value_dense(x)], axis=1)
        key_mask = ops.concatenate([ops.cast(state["memory_mask"], "bool"), mask], axis=1)
        q = self.query_dense(x)  # [B, 1, H, Dh]
        r = ops.cast(state["position"], x.dtype)  # [K, H, Dh], key j at distance K - 1 - j
        u = ops.cast(self.content_bias, q.dtype)
        pos_bias = ops.cast(self.position_bias, q.dtype)
        content = ops.einsum("bthk,bshk->bhts", q + u, keys)  # [B, H, 1, K]
        # With one query the relative shift is the identity: no pad, no skew.
        position = ops.einsum("bthk,shk->bhts", q + pos_bias, r)
        scores = ops.cast(content + position, "float32") * self._score_scale()
        # The lone query is the last position: every valid key is visible.
        weights = ops.cast(masked_softmax(scores, key_mask[:, None, None, :]), x.dtype)
        if self.attention_dropout_rate > 0:
            weights = self.attention_dropout(weights, training=training)
        out = ops.einsum("bhts,bshk->bthk", weights, values)
        y = self.dropout(self._output(out), training=training)
        memory = ops.concatenate([ops.cast(state["memory"], "float32"), ops.cast(x, "float32")], 1)
        new_state = {
            "memory": ops.stop_gradient(memory[:, -mem_len:]),
            "memory_mask": ops.cast(key_mask[:, -mem_len:], "int32"),
            "keys": ops.stop_gradient(keys[:, -mem_len:]),
            "values": ops.stop_gradient(values[:, -mem_len:]),
            "position": state["position"],
        }
        return y, new_state

    def _score_scale(self) -> float:
        # The original PAR project divides by Dh (its comment says sqrt(d_model)).
        return 1.0 / (self.head_dim if self.compat == "original" else math.sqrt(self.head_dim))

    def _output(self, out: Any) -> Any:
        """The output projection of [B, T, H, Dh] values, ReLU'd in `compat="original"`."""
        y = self.output_dense(out)
        return ops.relu(y) if self.compat == "original" else y

    def _attend(
        self,
        q_content: Any,
        q_position: Any,
        k: Any,
        v: Any,
        r: Any,
        key_mask: Any,
        training: bool | None,
    ) -> Any:
        """Weighted values [B, t, H, Dh] of t queries (biased for content and position
        scores), the last t of the K keys `k` causally; `r` holds the projected encodings
        of distances K - 1 down to 0 (causal) or to -t."""
        key_len = ops.shape(k)[1]
        content = ops.einsum("bthk,bshk->bhts", q_content, k)  # (a) + (c): [B, H, t, K]
        position = ops.einsum("bthk,lhk->bhtl", q_position, r)  # (b) + (d): [B, H, t, L]
        if self.causal:
            position = ops.pad(position, [[0, 0], [0, 0], [0, 0], [0, 1]])
        position = relative_shift(position, key_len)  # [B, H, t, K]

        # Scores, mask and softmax in float32 whatever the compute dtype.
        scores = ops.cast(content + position, "float32") * self._score_scale()
        visible = key_mask[:, None, None, :]  # [B, 1, 1, K]
        if self.causal:
            query_len = ops.shape(q_content)[1]
            key_pos = ops.arange(key_len)[None, :]
            query_pos = ops.arange(query_len)[:, None] + (key_len - query_len)
            visible = ops.logical_and(visible, (key_pos <= query_pos)[None, None])
        # A query that sees no key (a stream that starts with padding) gets zero weights.
        weights = ops.cast(masked_softmax(scores, visible), q_content.dtype)
        if self.attention_dropout_rate > 0:
            weights = self.attention_dropout(weights, training=training)
        return ops.einsum("bhts,bshk->bthk", weights, v)  # [B, t, H, Dh]

    # ------------------------------------------------------------------ call
    def call(
        self,
        x: Any,
        state: State | None = None,
        mask: Any | None = None,
        training: bool | None = None,
    ) -> tuple[Any, State]:
        cached = bool(state) and "keys" in state and self.mem_len > 0
        if cached and x.shape[1] == 1:
            batch = ops.shape(x)[0]
            mask = ops.ones((batch, 1), "bool") if mask is None else ops.cast(mask, "bool")
            return self._cached_step(x, state, mask, training)
        batch, query_len = ops.shape(x)[0], ops.shape(x)[1]
        if mask is None:
            mask = ops.ones((batch, query_len), dtype="bool")
        mask = ops.cast(mask, "bool")
        if self.mem_len > 0:
            if not state:
                state = self.get_initial_state(batch)
            memory = ops.cast(state["memory"], x.dtype)  # [B, M, D]
            context = ops.concatenate([memory, x], axis=1)  # [B, K, D]
            key_mask = ops.concatenate([ops.cast(state["memory_mask"], "bool"), mask], axis=1)
        else:
            context, key_mask = x, mask
        mem_len = self.mem_len
        key_len = mem_len + query_len

        q = self.query_dense(x)  # [B, T, H, Dh]
        k = self.key_dense(context)  # [B, K, H, Dh]
        v = self.value_dense(context)  # [B, K, H, Dh]
        distances = self._distances(key_len, 0 if self.causal else -query_len)
        r = sinusoidal_encoding(distances, self.d_model, x.dtype)
        r = self.position_dense(r)  # [L, H, Dh]

        q_content = q + ops.cast(self.content_bias, q.dtype)
        q_position = q + ops.cast(self.position_bias, q.dtype)
        chunk = self.query_chunk if self.causal and isinstance(query_len, int) else 0
        if not chunk or chunk >= query_len:
            out = self._attend(q_content, q_position, k, v, r, key_mask, training)
        else:
            # Queries start..stop see the first mem_len + stop keys only and are the last
            # queries of those: the layout of the whole call on fewer keys, whose
            # distances (keys - 1 down to 0) are the last rows of r. The scores the
            # causal mask would zero beyond each chunk's keys are never computed.
            outs = []
            for start in range(0, query_len, chunk):
                stop = min(start + chunk, query_len)
                keys = mem_len + stop
                outs.append(
                    self._attend(
                        q_content[:, start:stop],
                        q_position[:, start:stop],
                        k[:, :keys],
                        v[:, :keys],
                        r[key_len - keys :],
                        key_mask[:, :keys],
                        training,
                    )
                )
            out = ops.concatenate(outs, axis=1)
        y = self.dropout(self._output(out), training=training)  # [B, T, D]

        if self.mem_len == 0:
            return y, {}
        new_state = {
            "memory": ops.stop_gradient(ops.cast(context[:, -mem_len:], "float32")),
            "memory_mask": ops.cast(key_mask[:, -mem_len:], "int32"),
        }
        if cached:  # keep the inference cache in step with the memory
            new_state.update(
                keys=ops.stop_gradient(k[:, -mem_len:]),
                values=ops.stop_gradient(v[:, -mem_len:]),
                position=state["position"],
            )
        return y, new_state

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Keys and values of the memory are projected again at every segment; the
        # relative positions (memory + segment + 1) are projected once per call, shared by
        # the rows; content scores, position scores and the weighted values each cost
        # 2 (T + M) H Dh per query.
        # Non-causally the distances run from keys - 1 down to -T (keys + T of them), so
        # the position encodings and scores cover keys + T columns.
        width = self.num_heads * self.head_dim
        keys = seq_len + self.mem_len
        memory = 4.0 * self.d_model * width * self.mem_len / seq_len
        columns = keys + 1 if self.causal else keys + seq_len
        positions = 2.0 * self.d_model * width * columns / (seq_len * batch_size)
        if self.causal:
            return memory + positions + 6.0 * keys * width
        return memory + positions + (4.0 * keys + 2.0 * columns) * width
