"""Shared pieces of the softmax-based mechanisms: masked softmax, sliding windows, window grids.

* A sliding window (local attention): each query sees the `W` tokens before it and
  itself; the state is the last `W` keys and values, and a segment runs in blocks of `W`
  queries, each against its own block and the one before, O(T W).
* A window grid (DiagAttention, EVA): windows of `W` tokens at fixed stream positions 0,
  W, 2W, ... A segment that starts mid-window carries that window's first tokens in its
  state (a left-aligned buffer of W slots, their count `offset`). Queries and keys are
  gathered onto a grid that starts at the current window's first token, so windows are
  plain reshapes, and gathered back afterwards. With `real_token_layout` (`skip_pads`,
  what the layers' `call` passes to `attend`) a pad takes no place and gets output zero,
  so windows are cut by real tokens only, as rotary positions count them; without it
  every token keeps its place, pads masked as keys only (the layout of the float64
  reference, tests/attention/references.py).
"""

from __future__ import annotations

from typing import Any

from keras import ops

#: The `window_size` option's help, shared by local, diag and eva.
WINDOW_SIZE_HELP = "local: previous tokens each query sees; diag, eva: tokens per window"


def batch_gather(x: Any, index: Any) -> Any:
    """Per-example gather along axis 1: x [B, N, ...], index int [B, L] -> [B, L, ...]."""
    batch, size = ops.shape(x)[0], ops.shape(x)[1]
    rest = tuple(ops.shape(x)[2:])
    flat = ops.reshape(x, (-1,) + rest)
    offsets = ops.arange(batch, dtype="int32")[:, None] * ops.cast(size, "int32")
    flat_index = ops.reshape(ops.cast(index, "int32") + offsets, (-1,))
    return ops.reshape(ops.take(flat, flat_index, axis=0), (batch, -1) + rest)


# --------------------------------------------------------------- sliding window
def split_blocks(x: Any, window: int) -> Any:
    """[B, T, ...] -> [B, n, W, ...], zero-padded to n = ceil(T / W) blocks."""
    length = ops.shape(x)[1]
    num_blocks = (length + window - 1) // window
    rest = tuple(ops.shape(x)[2:])
    x = ops.pad(x, [[0, 0], [0, num_blocks * window - length]] + [[0, 0]] * len(rest))
    return ops.reshape(x, (-1, num_blocks, window) + rest)


def sliding_windows(x: Any, memory: Any, window: int) -> Any:
    """The keys each block of `split_blocks(queries, window)` may look at: [B, n, 2W, ...],
    for block b the W tokens before it (from `memory` [B, W, ...]) and the block itself;
    query i of block b and key j are W + i - j tokens apart."""
    blocks = split_blocks(x, window)
    before = ops.concatenate([memory[:, None], blocks[:, :-1]], axis=1)
    return ops.concatenate([before, blocks], axis=2)


# ------------------------------------------------------------------ window grid
def grid_length(length: Any, window: int) -> Any:
    """Tokens on the grid: enough whole windows for W - 1 carried tokens plus T."""
    return window * ((window - 1 + length + window - 1) // window)


def real_token_layout(valid: Any) -> tuple[Any, Any, Any]:
    """Where a segment's tokens go on the grid when padding takes no place.

    Args:
        valid: bool [B, T], True for real tokens.

    Returns:
        (order int32 [B, T]: the segment's real tokens in stream order, then its pads,
         i.e. the token each place takes (`to_grid`);
         place int32 [B, T]: each token's place counted from the segment's first, the
         real tokens before it, so a pad shares the place of the next real token
         (`from_grid`);
         count int32 [B]: the real tokens, the places the segment fills).
        With no pad all three are those of the plain layout: 0 .. T - 1 and T.

    Example:
        >>> order, place, count = real_token_layout(ops.array([[False, True, False, True]]))
        >>> [ops.convert_to_numpy(t).tolist() for t in (order, place, count)]
        [[[1, 3, 0, 2]], [[0, 0, 1, 1]], [2]]
    """
    length = ops.shape(valid)[1]
    valid = ops.cast(valid, "bool")
    ones = ops.cast(valid, "int32")
    place = ops.cumsum(ones, axis=1) - ones
    # Sort keys: real token t before every pad, each group in stream order. The keys
    # are distinct, so the order is the same whatever the sort's stability.
    tokens = ops.arange(length, dtype="int32")[None, :]
    order = ops.cast(ops.argsort(ops.where(valid, tokens, length + tokens), axis=1), "int32")
    return order, place, ops.sum(ones, axis=1)


def to_grid(x: Any, buffer: Any, offset: Any, window: int, order: Any | None = None) -> Any:
    """Places the carried partial window (`buffer` [B, W, ...], its first `offset` tokens
    left-aligned) and the segment x [B, T, ...] on the window grid [B, L, ...]: slot 0
    is the current window's first token, slot offset + i the segment's token order[i]
    (`real_token_layout`; token i without `order`); later slots hold copies of the last
    one (mask them with `grid_valid`)."""
    length = ops.shape(x)[1]
    slots = ops.arange(grid_length(length, window), dtype="int32")[None, :]
    offset = ops.cast(offset, "int32")[:, None]
    if order is None:
        source = ops.where(slots < offset, slots, window + slots - offset)
        source = ops.minimum(source, window + length - 1)
    else:
        place = ops.clip(slots - offset, 0, length - 1)  # [B, L]
        source = ops.where(slots < offset, slots, window + ops.take_along_axis(order, place, 1))
    return batch_gather(ops.concatenate([buffer, ops.cast(x, buffer.dtype)], axis=1), source)


def grid_valid(
    valid: Any, buffer_valid: Any, offset: Any, window: int, order: Any | None = None
) -> Any:
    """bool [B, L]: grid slots holding real, unmasked tokens (`order` as for `to_grid`)."""
    length = ops.shape(valid)[1]
    slots = ops.arange(grid_length(length, window), dtype="int32")[None, :]
    inside = slots < ops.cast(offset, "int32")[:, None] + length
    valid, buffer_valid = ops.cast(valid, "float32"), ops.cast(buffer_valid, "float32")
    gathered = to_grid(valid, buffer_valid, offset, window, order)
    return ops.logical_and(inside, gathered > 0.5)


def from_grid(grid: Any, offset: Any, length: Any, place: Any | None = None) -> Any:
    """The segment's T tokens back from the grid: [B, L, ...] -> [B, T, ...].

    `place` int [B, T] is each token's place counted from the segment's first
    (`real_token_layout`); None: token t's is t.
    """
    if place is None:
        place = ops.arange(length, dtype="int32")[None, :]
    return batch_gather(grid, ops.cast(offset, "int32")[:, None] + ops.cast(place, "int32"))


def next_offset(offset: Any, length: Any, window: int) -> Any:
    """int [B]: tokens of the window that is open after the segment.

    `length` is the places the segment fills: T, or per row int [B] (`real_token_layout`'s
    count); likewise in `grid_buffer`."""
    return (ops.cast(offset, "int32") + length) % window


def grid_buffer(grid: Any, offset: Any, length: Any, window: int) -> Any:
    """The open window's tokens after the segment, [B, W, ...] left-aligned, zero past
    the new offset (float validity gives the new buffer validity)."""
    end = ops.cast(offset, "int32") + length
    new_offset = end % window
    slots = ops.arange(window, dtype="int32")[None, :]
    index = ops.minimum(end[:, None] - new_offset[:, None] + slots, ops.shape(grid)[1] - 1)
    taken = batch_gather(grid, index)
    keep = ops.cast(slots < new_offset[:, None], taken.dtype)
    for _ in range(len(taken.shape) - 2):
        keep = ops.expand_dims(keep, -1)
    return taken * keep
