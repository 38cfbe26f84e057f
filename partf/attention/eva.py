"""EVA: efficient attention via control variates, causal form (Zheng et al., ICLR 2023).

Softmax attention splits into the keys near the query and the rest. EVA computes the
query's own window exactly (W tokens at fixed stream positions 0, W, 2W, ..., counted in
real tokens) and summarises every earlier chunk c of C tokens by one key
k_c = f_k(mean k) and one value beta_c, a self-normalised importance sampling estimate:

    beta_c = sum_{j in c} softmax_j((w_c . k_j - |k_j|^2 / 2) / sqrt(Dh)) v_j,
    w_c = mu_c + noise (training) or mu_c (evaluation),  mu_c = f_q(mean q) + f_k(mean k),

f_q, f_k a linear map and a layer norm. A chunk enters the softmax with the logit
q . k_c / sqrt(Dh), normalised jointly with the exact keys. Unlike the authors' code, a
query sees only the `mem_chunks` most recent summaries, for a bounded state.
`chunk_mask="authors"` gives a query the summary of every chunk before its own, those of
its exact window among them; "partf" leaves those to the exact part, so no token counts
twice (they agree when chunks are as large as the window). In evaluation EVA is
deterministic and segments equal one call.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
from keras import ops

from partf.attention.base import Attention, State, check_choice
from partf.attention.chunked import CHUNK_SIZE_HELP
from partf.attention.eva_noncausal import noncausal_eva
from partf.attention.masking import masked_softmax, valid_tokens
from partf.attention.projection_net import ProjectionNet
from partf.attention.registry import register_attention
from partf.attention.windowed import (
    WINDOW_SIZE_HELP,
    batch_gather,
    from_grid,
    grid_buffer,
    grid_valid,
    next_offset,
    real_token_layout,
    to_grid,
)
from partf.random import normal as normal_draws

#: Proposal maps of `adaptive_proj`: a linear layer with ("qk") or without ("no-ln")
#: a layer norm after it, as the authors' causal EVA names them.
ADAPTIVE_PROJ = ("qk", "no-ln")
#: Which chunk summaries a query sees besides the `mem_chunks` before its exact part:
#: those of the exact part's chunks before the query's own chunk ("authors", the
#: authors' causal mask, the default) or none of the exact part's ("partf").
CHUNK_MASKS = ("authors", "partf")


def t5_buckets(distances: np.ndarray, num_buckets: int, max_distance: int) -> np.ndarray:
    """T5's causal relative-position buckets (int32, the shape of `distances`) of
    distances query minus key: the first half of the buckets hold one distance each,
    the rest cover distances up to `max_distance` in logarithmically growing ranges,
    anything farther shares the last bucket, negative distances go to bucket 0.

    Example:
        >>> t5_buckets(np.array([0, 1, 7, 8, 100]), 16, 64).tolist()
        [0, 1, 7, 8, 15]"""
    n = np.maximum(np.asarray(distances), 0)
    exact = num_buckets // 2
    spread = max(math.log(max_distance / exact), 1e-6)
    with np.errstate(divide="ignore"):
        far = exact + np.log(np.maximum(n, 1) / exact) / spread * (num_buckets - exact)
    far = np.minimum(far.astype(np.int64), num_buckets - 1)
    return np.where(n < exact, n, far).astype(np.int32)


@register_attention("eva", position="rotary")
class EVAAttention(Attention):
    """Causal EVA: exact softmax within a window, control variates for earlier chunks.

    Args:
        d_model, num_heads, head_dim, dropout_rate, causal, use_bias: see `Attention`.
        window_size: W, tokens per exact window (fixed stream positions).
        chunk_size: C, tokens per summarised chunk; must divide W.
        mem_chunks: M, summaries of the chunks before its window each query sees; the
            state keeps that many (0: windows only).
        overlap_window: the exact part also covers the previous window (the authors'
            extended window); the summaries then start before that window.
        adaptive_proj: proposal maps, "qk" (linear + layer norm) or "no-ln".
        use_t5_rpe: a learned bias on the exact logits by distance in T5's buckets (one
            scalar per bucket shared by the heads, scaled by 1 / sqrt(Dh)), as the
            authors' causal language models.
        chunk_mask: "authors" or "partf" (module docstring).
        seed: seed of the layer's `SeedGenerator` (the proposal noise).

    State: `buf_q`, `buf_k`, `buf_v` [B, W, H, Dh], `buf_valid` [B, W], `offset` [B]
    int32 (the open window), and `mem_k`, `mem_v` [B, M, H, Dh], `mem_valid` [B, M]
    (the summaries), float32. With `overlap_window`, also `prev_k`, `prev_v`,
    `prev_valid` (the window before) and W / C more summaries. With `rotary`,
    `position` [B] int32.

    With `causal=False` (the authors' encoder) a query sees its own window exactly and
    every other chunk of the sequence through its summary; there is no state (but the
    rotary position), and `overlap_window` and `use_t5_rpe` are refused."""

    supports_rotary = True
    call_attend_options = {"skip_pads": True}
    option_help = {
        "window_size": WINDOW_SIZE_HELP,
        "chunk_size": CHUNK_SIZE_HELP,
        "mem_chunks": "eva: chunk summaries before its window each query sees",
        "overlap_window": "eva: the exact part also covers the previous window",
        "adaptive_proj": "eva: proposal maps, qk (linear + layer norm) or no-ln (linear)",
        "use_t5_rpe": "eva: learned T5 relative position bias on the exact window",
        "chunk_mask": "eva: chunks a query sees, authors (the authors' causal mask: also its "
        "exact part's chunks before its own) or partf (only those before its exact part); "
        "non-causal: the same mask",
    }

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        window_size: int = 128,
        chunk_size: int = 8,
        mem_chunks: int = 64,
        overlap_window: bool = False,
        adaptive_proj: str = "qk",
        use_t5_rpe: bool = False,
        chunk_mask: str = "authors",
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(d_model, num_heads, **kwargs)
        if window_size <= 0 or chunk_size <= 0 or window_size % chunk_size:
            raise ValueError(
                f"EVA needs positive window_size and chunk_size with chunk_size dividing "
                f"window_size, got window_size={window_size}, chunk_size={chunk_size}."
            )
        if mem_chunks < 0:
            raise ValueError(f"mem_chunks must be >= 0, got {mem_chunks}.")
        if not self.causal and (overlap_window or use_t5_rpe):
            raise ValueError(
                "overlap_window and use_t5_rpe are options of EVA's causal form; leave them "
                "off with causal=False."
            )
        check_choice("chunk_mask", chunk_mask, CHUNK_MASKS)
        check_choice("adaptive_proj", adaptive_proj, ADAPTIVE_PROJ)
        self.window_size = window_size
        self.chunk_size = chunk_size
        self.mem_chunks = mem_chunks
        self.overlap_window = bool(overlap_window)
        self.adaptive_proj = adaptive_proj
        self.use_t5_rpe = bool(use_t5_rpe)
        self.chunk_mask = chunk_mask
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    @property
    def carried_windows(self) -> int:
        """Windows before the query's own that its exact part covers (0 or 1)."""
        return int(self.overlap_window)

    @property
    def inner_chunks(self) -> int:
        """Chunks of the exact part a query may also see summarised: those of its own
        window (and of the one before, with overlap) with the authors' causal mask,
        else 0 (partf's mask, or the non-causal form)."""
        if self.chunk_mask != "authors" or not self.causal:
            return 0
        return (1 + self.carried_windows) * (self.window_size // self.chunk_size)

    @property
    def memory_slots(self) -> int:
        """Chunk summaries the state keeps: M, plus the previous window's with overlap."""
        if not self.mem_chunks:
            return 0
        return self.mem_chunks + self.carried_windows * (self.window_size // self.chunk_size)

    @property
    def t5_num_buckets(self) -> int:
        """Buckets of the relative position bias: half the exact span, within 16..64."""
        span = (1 + self.carried_windows) * self.window_size
        return max(min(span // 2, 64), 16)

    def build(self, input_shape) -> None:
        super().build(input_shape)
        norm = self.adaptive_proj == "qk"
        self.project_q = ProjectionNet(self, self.head_dim, "project_q", norm=norm)
        self.project_k = ProjectionNet(self, self.head_dim, "project_k", norm=norm)
        if self.use_t5_rpe:
            self.t5_bias = self.add_weight(
                name="t5_bias", shape=(self.t5_num_buckets,), initializer="zeros"
            )

    def state_spec(self, batch_size: int) -> dict[str, tuple[tuple[int, ...], str]]:
        if not self.causal:  # one whole sequence per call: nothing to carry
            return self.position_state_spec(batch_size)
        window = ((batch_size, self.window_size, self.num_heads, self.head_dim), "float32")
        flags = ((batch_size, self.window_size), "float32")
        spec = {
            "buf_q": window,
            "buf_k": window,
            "buf_v": window,
            "buf_valid": flags,
            "offset": ((batch_size,), "int32"),
        }
        if self.overlap_window:
            spec.update(prev_k=window, prev_v=window, prev_valid=flags)
        if self.mem_chunks:
            slots = self.memory_slots
            memory = ((batch_size, slots, self.num_heads, self.head_dim), "float32")
            spec.update(mem_k=memory, mem_v=memory, mem_valid=((batch_size, slots), "float32"))
        return {**spec, **self.position_state_spec(batch_size)}

    def position_bias(self) -> Any:
        """float32 [W, (1 + overlap) W]: the T5 bias of each exact logit, / sqrt(Dh)."""
        window = self.window_size
        span = (1 + self.carried_windows) * window
        # Query minus key position; keys of the previous window (with overlap) come first.
        distances = np.arange(window)[:, None] - np.arange(window - span, window)[None, :]
        buckets = t5_buckets(distances, self.t5_num_buckets, span)
        bias = ops.take(ops.cast(self.t5_bias, "float32"), ops.convert_to_tensor(buckets))
        return bias / math.sqrt(self.head_dim)

    def summarize(
        self, q: Any, k: Any, v: Any, valid: Any, training: bool | None
    ) -> tuple[Any, Any, Any]:
        """Chunk summaries of [B, n, C, H, Dh] float32 chunks (valid: float [B, n, C]):
        (keys f_k(mean k), values beta, both [B, n, H, Dh]; bool [B, n] non-empty chunks)."""
        count = ops.sum(valid, axis=2)  # [B, n]
        weight = (valid / ops.maximum(count, 1.0)[..., None])[..., None, None]
        q_bar = self.project_q(ops.sum(q * weight, axis=2))
        k_bar = self.project_k(ops.sum(k * weight, axis=2))
        omega = q_bar + k_bar
        if training:
            omega = omega + normal_draws(tuple(ops.shape(omega)), self.seed_generator)
        dots = ops.einsum("...chd,...hd->...ch", k, omega)
        log_w = (dots - 0.5 * ops.sum(ops.square(k), axis=-1)) / math.sqrt(self.head_dim)
        probs = masked_softmax(log_w, (valid > 0.5)[..., None], axis=2)
        beta = ops.einsum("bnch,bnchd->bnhd", probs, v)
        return k_bar, beta, count > 0.0

    def attend(
        self, q, k, v, state, mask=None, training=None, skip_pads=False
    ) -> tuple[Any, State]:
        """Per-head q, k, v [B, T, H, Dh] -> ([B, T, H, Dh], state); `skip_pads` as in
        `partf.attention.windowed` (a pad also has no place in the chunks)."""
        if not self.causal:
            return noncausal_eva(self, q, k, v, mask, training), {}
        window, chunk, mem = self.window_size, self.chunk_size, self.mem_chunks
        heads, dim = self.num_heads, self.head_dim
        per_window = window // chunk
        # float32 throughout, whatever the compute dtype: the chunk summaries (and the
        # state they go into) are float32, like linear attentions' running sums. Keras
        # casts floating call arguments, the state included, to the compute dtype under
        # mixed precision, so the state is cast back too.
        dtype = q.dtype
        q, k, v = (ops.cast(t, "float32") for t in (q, k, v))
        state = {
            name: value if name == "offset" else ops.cast(value, "float32")
            for name, value in state.items()
        }
        batch, length = ops.shape(q)[0], ops.shape(q)[1]
        offset = state["offset"]
        valid = valid_tokens(mask, batch, length)
        order, place, filled = None, None, length
        if skip_pads and mask is not None:
            order, place, filled = real_token_layout(valid)
        q_grid = to_grid(q, state["buf_q"], offset, window, order)  # [B, L, H, Dh]
        k_grid = to_grid(k, state["buf_k"], offset, window, order)
        v_grid = to_grid(v, state["buf_v"], offset, window, order)
        valid_grid = grid_valid(valid, state["buf_valid"], offset, window, order)  # [B, L]

        def split(x, size):  # [B, L, ...] -> [B, L / size, size, ...]
            return ops.reshape(x, (batch, -1, size) + tuple(ops.shape(x)[2:]))

        q_win, k_win, v_win = split(q_grid, window), split(k_grid, window), split(v_grid, window)
        valid_win = split(valid_grid, window)  # [B, n, W]
        num_windows = ops.shape(q_win)[1]
        scale = 1.0 / math.sqrt(dim)

        causal = ops.arange(window)[:, None] >= ops.arange(window)[None, :]
        visible = ops.logical_and(causal[None, None, None], valid_win[:, :, None, None])
        new_state = {
            "buf_q": grid_buffer(q_grid, offset, filled, window),
            "buf_k": grid_buffer(k_grid, offset, filled, window),
            "buf_v": grid_buffer(v_grid, offset, filled, window),
            "buf_valid": grid_buffer(ops.cast(valid_grid, "float32"), offset, filled, window),
            "offset": next_offset(offset, filled, window),
        }
        # After the segment, the open window is grid window (offset + places filled) // W.
        open_window = (ops.cast(offset, "int32") + filled) // window
        if self.overlap_window:
            # Window w's exact keys: window w - 1 (the state's for w = 0), then its own.
            def previous(own, carried):  # [B, n, W, ...] -> [B, n + 1, W, ...]
                return ops.concatenate([carried[:, None], own], axis=1)

            prev_k = previous(k_win, state["prev_k"])
            prev_v = previous(v_win, state["prev_v"])
            prev_ok = previous(ops.cast(valid_win, "float32"), state["prev_valid"])
            before = ops.ones((window, window), "bool")[None, None, None]
            visible = ops.concatenate(
                [
                    ops.logical_and(before, prev_ok[:, :-1, None, None] > 0.5),
                    visible,
                ],
                axis=-1,
            )
            k_win = ops.concatenate([prev_k[:, :-1], k_win], axis=2)  # [B, n, 2W, H, Dh]
            v_win = ops.concatenate([prev_v[:, :-1], v_win], axis=2)
            # The window before the open one: entry open_window of [carried; grid windows].
            index = open_window[:, None]
            new_state.update(
                prev_k=batch_gather(prev_k, index)[:, 0],
                prev_v=batch_gather(prev_v, index)[:, 0],
                prev_valid=batch_gather(prev_ok, index)[:, 0],
            )
        exact = ops.shape(k_win)[2]  # (1 + overlap) W keys
        logits = ops.einsum("bnihd,bnjhd->bnhij", q_win, k_win) * scale  # [B, n, H, W, exact]
        if self.use_t5_rpe:
            logits = logits + self.position_bias()
        if mem:
            chunk_valid = ops.cast(split(valid_grid, chunk), "float32")
            keys, values, ok = self.summarize(
                split(q_grid, chunk),
                split(k_grid, chunk),
                split(v_grid, chunk),
                chunk_valid,
                training,
            )
            # The memory's summaries come before the grid's: window w sees list
            # entries [w * W/C, w * W/C + M), the M chunks just before its exact part
            # (the memory holds W/C more summaries when that part covers the window
            # before, so the same entries are the M before that window). The exact
            # part's own chunks follow them in the list: the authors' mask reads on.
            inner = self.inner_chunks
            all_k = ops.concatenate([state["mem_k"], keys], axis=1)
            all_v = ops.concatenate([state["mem_v"], values], axis=1)
            all_ok = ops.concatenate([state["mem_valid"] > 0.5, ok], axis=1)
            seen = mem + inner
            band = ops.arange(num_windows)[:, None] * per_window + ops.arange(seen)[None, :]
            band_k = ops.take(all_k, band, axis=1)  # [B, n, M + inner, H, Dh]
            band_v = ops.take(all_v, band, axis=1)
            band_ok = ops.take(all_ok, band, axis=1)  # [B, n, M + inner]
            chunk_logits = ops.einsum("bnihd,bnmhd->bnhim", q_win, band_k) * scale
            logits = ops.concatenate([logits, chunk_logits], axis=-1)
            full = (batch, num_windows, 1, window)
            chunk_visible = ops.broadcast_to(band_ok[:, :, None, None, :], full + (seen,))
            if inner:
                # Query i of a window sees the exact part's chunks before its own: with
                # overlap, the previous window's W/C chunks come first.
                own_chunk = self.carried_windows * per_window + ops.arange(window) // chunk
                before = ops.arange(inner)[None, :] < own_chunk[:, None]  # [W, inner]
                before = ops.concatenate([ops.ones((window, mem), "bool"), before], axis=1)
                chunk_visible = ops.logical_and(chunk_visible, before[None, None, None])
            visible = ops.concatenate(
                [ops.broadcast_to(visible, full + (exact,)), chunk_visible], axis=-1
            )
            slots = ops.arange(self.memory_slots, dtype="int32")[None, :]
            keep = open_window[:, None] * per_window + slots
            new_state.update(
                mem_k=batch_gather(all_k, keep),
                mem_v=batch_gather(all_v, keep),
                mem_valid=ops.cast(batch_gather(all_ok, keep), "float32"),
            )
        probs = self.dropout(masked_softmax(logits, visible), training=training)
        out = ops.einsum("bnhij,bnjhd->bnihd", probs[..., :exact], v_win)
        if mem:
            out = out + ops.einsum("bnhim,bnmhd->bnihd", probs[..., exact:], band_v)
        out = from_grid(ops.reshape(out, (batch, -1, heads, dim)), offset, length, place)
        if place is not None:
            # A pad shares the place of the next real token, whose output it must not read.
            out = ops.where(valid[:, :, None, None], out, 0.0)
        return ops.cast(out, dtype), new_state

    def mechanism_flops(self, seq_len: int, batch_size: int = 1) -> float:
        # Exact softmax within the window (W keys, 2W with overlap) plus the
        # `mem_chunks` chunk summaries each query sees; summarising costs about
        # 4 H Dh per token.
        # Non-causal: its own window and the summaries of every chunk of the sequence.
        width = self.num_heads * self.head_dim
        exact = (1 + self.carried_windows) * self.window_size
        if not self.causal:
            padded = -(-seq_len // self.window_size) * self.window_size
            summaries = padded // self.chunk_size
            return (4.0 * (exact + summaries) * width * padded / seq_len) + 4.0 * width
        # The authors' mask adds the exact part's chunks, half of them on average.
        inner = self.inner_chunks / 2 if self.mem_chunks else 0
        return 4.0 * (exact + self.mem_chunks + inner) * width + 4.0 * width
