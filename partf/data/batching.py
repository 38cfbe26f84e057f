"""Context batching: cutting one token stream into batches a recurrent-memory model
(Transformer-XL) can read in order (docs/data.md, "How the records are built").

The stream is cut into `batch_size` contiguous rows of n*L + 1 tokens (L = seq_len, n
batches); batch i holds, in row r, the L + 1 tokens starting at t[r*n*L + i*L], inputs
the first L and targets the last L. Row r of batch i+1 starts with the token row r of
batch i ends with, so every token but the dropped tail (less than one batch) is an input
exactly once, and every neighbouring pair is an input/target pair (the original project
cut non-overlapping windows, so the last token of each was never an input). All of it is
index arithmetic on a strided view: no copy, and a memory-mapped stream stays on disk.
"""

from __future__ import annotations

import numpy as np

from partf.errors import DataError, UsageError


def check_batch_shape(batch_size: int, seq_len: int) -> None:
    """Raises UsageError unless batch_size and seq_len are positive integers."""
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise UsageError(
                f"--{name} must be a positive integer, got {value!r}; e.g. --{name}=32"
            )


def num_context_batches(num_tokens: int, batch_size: int, seq_len: int) -> int:
    """Number of batches a stream of `num_tokens` tokens gives: (N - 1) // (B*L)."""
    check_batch_shape(batch_size, seq_len)
    return max(0, (int(num_tokens) - 1) // (batch_size * seq_len))


def num_lost_tokens(num_tokens: int, batch_size: int, seq_len: int) -> int:
    """Tokens at the end of the stream that end up in no batch (< batch_size*seq_len)."""
    n = num_context_batches(num_tokens, batch_size, seq_len)
    return int(num_tokens) - (batch_size * n * seq_len + 1) if n else int(num_tokens)


def context_batches(tokens: np.ndarray, batch_size: int, seq_len: int) -> np.ndarray:
    """A read-only view [n, B, L + 1] of a 1-D token stream (array or memmap), without
    copying: n = (N - 1) // (B*L), `out[i, r] == tokens[r*n*L + i*L : r*n*L + i*L + L + 1]`.
    UsageError for a bad B or L or a stream not 1-D; DataError for fewer than B*L + 1
    tokens.

    Example:
        >>> context_batches(np.arange(9), batch_size=2, seq_len=2).tolist()
        [[[0, 1, 2], [4, 5, 6]], [[2, 3, 4], [6, 7, 8]]]"""
    tokens = np.asarray(tokens) if not isinstance(tokens, np.memmap) else tokens
    if tokens.ndim != 1:
        raise UsageError(f"tokens must be a 1-D stream, got shape {tokens.shape}")
    n = num_context_batches(tokens.shape[0], batch_size, seq_len)
    if n == 0:
        raise DataError(
            f"the text gives {tokens.shape[0]} tokens, fewer than one batch needs "
            f"(batch_size*seq_len + 1 = {batch_size * seq_len + 1}); use a smaller "
            f"--batch_size or --seq_len, or more text"
        )
    step = tokens.strides[0]
    return np.lib.stride_tricks.as_strided(
        tokens,
        shape=(n, batch_size, seq_len + 1),
        strides=(seq_len * step, n * seq_len * step, step),
        writeable=False,
    )


def stream_from_batches(batches: np.ndarray) -> np.ndarray:
    """Inverts `context_batches`: the B*n*L + 1 tokens that [n, B, L + 1] context batches
    (with the one-token overlap) cover, in order."""
    batches = np.asarray(batches)
    if batches.ndim != 3 or batches.shape[2] < 2:
        raise UsageError(f"batches must have shape [n, B, L + 1] with L >= 1, got {batches.shape}")
    # [n, B, L] -> [B, n, L]: row r's inputs of every batch, in order.
    inputs = np.transpose(batches[:, :, :-1], (1, 0, 2)).reshape(-1)
    return np.concatenate([inputs, batches[-1, -1, -1:]])
