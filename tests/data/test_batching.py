"""Context batching against a loop-by-loop reference: contiguity, overlap, lost tokens."""

from __future__ import annotations

import numpy as np
import pytest

from partf.data import (
    DataError,
    UsageError,
    context_batches,
    num_context_batches,
    num_lost_tokens,
    stream_from_batches,
)


def reference_batches(tokens: list[int], batch_size: int, seq_len: int) -> np.ndarray:
    """Slow, obvious form: split into B streams of n*L + 1, cut windows stepping by L."""
    n = (len(tokens) - 1) // (batch_size * seq_len)
    streams = [tokens[r * n * seq_len : (r + 1) * n * seq_len + 1] for r in range(batch_size)]
    batches = []
    for i in range(n):
        batches.append([stream[i * seq_len : i * seq_len + seq_len + 1] for stream in streams])
    return np.array(batches)


# Sizes include exact fits (no token lost), one token short, and odd lengths.
CASES = [(9, 2, 2), (100, 3, 5), (97, 4, 3), (1 + 4 * 7 * 5, 4, 7), (4 * 7 * 5, 4, 7), (64, 1, 1)]


@pytest.mark.parametrize("num_tokens,batch_size,seq_len", CASES)
def test_matches_reference_and_round_trips(num_tokens, batch_size, seq_len):
    tokens = np.random.default_rng(num_tokens).integers(0, 1000, num_tokens).astype(np.int32)
    batches = context_batches(tokens, batch_size, seq_len)
    expected = reference_batches(tokens.tolist(), batch_size, seq_len)
    np.testing.assert_array_equal(batches, expected)
    n = batches.shape[0]
    assert n == num_context_batches(num_tokens, batch_size, seq_len)
    # Round trip: the batches cover exactly the first B*n*L + 1 tokens.
    covered = tokens[: batch_size * n * seq_len + 1]
    np.testing.assert_array_equal(stream_from_batches(batches), covered)


@pytest.mark.parametrize("num_tokens,batch_size,seq_len", CASES)
def test_rows_continue_with_one_token_overlap(num_tokens, batch_size, seq_len):
    tokens = np.arange(num_tokens, dtype=np.int32)  # ids equal positions in the stream
    batches = context_batches(tokens, batch_size, seq_len)
    # Row r of batch i+1 starts with the token row r of batch i ends with.
    np.testing.assert_array_equal(batches[1:, :, 0], batches[:-1, :, -1])
    # Within a row, tokens are consecutive.
    np.testing.assert_array_equal(np.diff(batches, axis=2), 1)
    # Row r+1 starts where row r ends, so no pair of neighbours is skipped.
    np.testing.assert_array_equal(batches[0, 1:, 0], batches[-1, :-1, -1])
    # Every token but the tail is an input exactly once.
    inputs = np.sort(batches[:, :, :-1].reshape(-1))
    np.testing.assert_array_equal(inputs, np.arange(inputs.size))


@pytest.mark.parametrize("num_tokens,batch_size,seq_len", CASES)
def test_only_the_tail_is_lost(num_tokens, batch_size, seq_len):
    tokens = np.arange(num_tokens, dtype=np.int32)
    batches = context_batches(tokens, batch_size, seq_len)
    used = set(batches.reshape(-1).tolist())
    lost = [t for t in tokens.tolist() if t not in used]
    assert lost == list(range(num_tokens - len(lost), num_tokens))  # a suffix
    assert len(lost) == num_lost_tokens(num_tokens, batch_size, seq_len)
    assert len(lost) < batch_size * seq_len


def test_memmap_is_viewed_not_copied(tmp_path):
    path = tmp_path / "tokens.int32"
    np.arange(1001, dtype="<i4").tofile(path)
    tokens = np.memmap(path, dtype="<i4", mode="r")
    batches = context_batches(tokens, 5, 8)
    assert np.shares_memory(batches, tokens)
    assert batches.shape == (25, 5, 9)
    assert not batches.flags.writeable


def test_too_short_and_bad_sizes():
    with pytest.raises(DataError, match="fewer than one batch"):
        context_batches(np.arange(2 * 3), 2, 3)  # needs 2*3 + 1
    assert context_batches(np.arange(7), 2, 3).shape == (1, 2, 4)
    for batch_size, seq_len in [(0, 4), (4, 0), (-1, 4), (2.0, 4), (True, 4)]:
        with pytest.raises(UsageError, match="positive integer"):
            context_batches(np.arange(100), batch_size, seq_len)
    with pytest.raises(UsageError, match="1-D"):
        context_batches(np.zeros([4, 4]), 1, 1)
