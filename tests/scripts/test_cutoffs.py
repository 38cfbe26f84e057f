"""Tests for scripts/cutoffs.py: optimality against brute force and agreement with the slow DP."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tests.scripts import load_script

_cutoffs = load_script("cutoffs")
optimal_cutoffs = _cutoffs.optimal_cutoffs
partition_cost = _cutoffs.partition_cost
read_frequencies = _cutoffs.read_frequencies


def _frequency_vectors(n: int, seed: int) -> list[np.ndarray]:
    """Integer counts with many ties and zeros, uniform floats, and a heavy-tailed Zipf."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, n).astype(np.float64)
    counts[0] += 1  # never all zero
    floats = rng.random(n)
    zipf = np.minimum(rng.zipf(1.3, n), 10_000).astype(np.float64)
    zipf[rng.random(n) < 0.2] = 0.0
    return [counts, floats, zipf]


def _per_token_cost(freqs: np.ndarray, cutoffs: tuple[int, ...], cost: str) -> float:
    """Expected columns per token, summed token by token: a second definition of the cost."""
    bounds = [0, *cutoffs, freqs.size]
    columns = np.empty(freqs.size)
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        if cost == "paper":
            # Every token pays for the head (its tokens plus one column per tail cluster),
            # and a tail token also for its own cluster.
            columns[a:b] = (cutoffs[0] if cutoffs else freqs.size) + len(cutoffs)
            if k > 0:
                columns[a:b] += b - a
        else:
            columns[a:b] = b - a
    return float(np.dot(freqs, columns) / freqs.sum())


def _brute_force(freqs: np.ndarray, num_clusters: int, cost: str) -> float:
    best = math.inf
    for cuts in itertools.combinations(range(1, freqs.size), num_clusters - 1):
        best = min(best, _per_token_cost(freqs, cuts, cost))
    return best


def _slow_dp(freqs: np.ndarray, num_clusters: int, cost: str = "original"):
    """Direct transcription of the original O(K N^2) loops, ties to the later split."""
    seq = sorted(freqs.tolist(), reverse=True)
    n = len(seq)
    prefix = [0.0]
    for x in seq:
        prefix.append(prefix[-1] + x)
    d = np.full((num_clusters, n), np.inf)
    if cost == "original":
        d[0] = np.array(prefix[1:]) * np.arange(1, n + 1)
    else:
        d[0] = (np.arange(1, n + 1) + num_clusters - 1) * prefix[-1]
    path: dict[tuple[int, int], list[int]] = {}
    for cut in range(num_clusters - 1):
        for j in range(n):
            for i in range(cut, j):
                curr = d[cut, i] + (j - i) * (prefix[j + 1] - prefix[i + 1])
                if curr <= d[cut + 1, j]:
                    d[cut + 1, j] = curr
                    path[cut, j] = path.get((cut - 1, i), []) + [i]
    ends = path.get((num_clusters - 2, n - 1), [])
    return tuple(i + 1 for i in ends), d[num_clusters - 1, n - 1] / prefix[-1]


def _dense_dp(freqs: np.ndarray, num_clusters: int) -> tuple[tuple[int, ...], float]:
    """The same recurrence with a full numpy scan per right end: exact, O(K N^2)."""
    seq = np.sort(freqs)[::-1]
    n = seq.size
    prefix = np.concatenate([[0.0], np.cumsum(seq)])
    layer = prefix[1:] * np.arange(1, n + 1)
    splits = []
    for first in range(num_clusters - 1):
        new = np.full(n, np.inf)
        split = np.full(n, -1)
        for j in range(first + 1, n):
            i = np.arange(first, j)
            values = layer[first:j] + (j - i) * (prefix[j + 1] - prefix[i + 1])
            lowest = values.min()
            new[j] = lowest
            split[j] = i[np.flatnonzero(values == lowest)[-1]]
        layer = new
        splits.append(split)
    ends, j = [], n - 1
    for split in reversed(splits):
        j = int(split[j])
        ends.append(j)
    return tuple(e + 1 for e in reversed(ends)), float(layer[-1] / prefix[-1])


@pytest.mark.parametrize("cost", ["original", "paper"])
@pytest.mark.parametrize("num_clusters", [2, 3, 4])
def test_optimal_against_brute_force(num_clusters, cost):
    for seed in range(3):
        for freqs in _frequency_vectors(40 if num_clusters < 4 else 24, seed):
            result = optimal_cutoffs(freqs, num_clusters, cost=cost)
            ordered = np.sort(freqs)[::-1]
            best = _brute_force(ordered, num_clusters, cost)
            assert len(result.cutoffs) == num_clusters - 1
            assert result.cost == pytest.approx(best, rel=1e-12)
            # The reported cutoffs really achieve that cost.
            assert _per_token_cost(ordered, result.cutoffs, cost) == pytest.approx(best, rel=1e-12)


def test_unsorted_search_is_optimal_in_input_order():
    for freqs in _frequency_vectors(30, seed=7):
        result = optimal_cutoffs(freqs, 3, sort=False)
        assert not result.sorted
        best = _brute_force(freqs, 3, "original")
        assert result.cost == pytest.approx(best, rel=1e-12)
        assert _per_token_cost(freqs, result.cutoffs, "original") == pytest.approx(best, rel=1e-12)
        # Keeping the input order can never beat sorting, whose optimum is a lower bound.
        assert optimal_cutoffs(freqs, 3).cost <= result.cost + 1e-9


@pytest.mark.parametrize("cost", ["original", "paper"])
def test_matches_slow_dynamic_programme(cost):
    rng = np.random.default_rng(3)
    for trial in range(12):
        n = int(rng.integers(20, 90))
        num_clusters = int(rng.integers(2, 6))
        freqs = _frequency_vectors(n, seed=trial)[trial % 3]
        result = optimal_cutoffs(freqs, num_clusters, cost=cost)
        cutoffs, value = _slow_dp(freqs, num_clusters, cost)
        # Same float formula and the same tie rule: identical cutoffs and cost bit for bit.
        assert result.cutoffs == cutoffs
        assert result.cost == value


def test_matches_dense_scan_on_a_large_vocabulary():
    rng = np.random.default_rng(11)
    zipf = 1.0 / np.arange(1, 2501) ** 1.1
    counts = rng.multinomial(200_000, zipf / zipf.sum()).astype(np.float64)  # ties and zeros
    for freqs in (zipf, counts):
        result = optimal_cutoffs(freqs, 4)
        cutoffs, value = _dense_dp(freqs, 4)
        assert result.cutoffs == cutoffs
        assert result.cost == value


def test_partition_cost_matches_per_token_definition():
    rng = np.random.default_rng(5)
    freqs = rng.random(25)
    for cuts in [(3,), (1, 24), (5, 9, 17)]:
        for cost in ("original", "paper"):
            expected = _per_token_cost(freqs, cuts, cost)
            assert partition_cost(freqs, cuts, cost=cost) == pytest.approx(expected, rel=1e-12)


def test_one_cluster_is_a_full_softmax():
    result = optimal_cutoffs([5.0, 1.0, 3.0], 1)
    assert result.cutoffs == ()
    assert result.cost == pytest.approx(3.0)
    assert result.flags() == ""


def test_flags_format():
    freqs = np.array([100, 50, 30, 20, 10, 5, 5, 4, 3, 2, 1, 1], dtype=np.float64)
    result = optimal_cutoffs(freqs, 3)
    assert result.flags() == " ".join(f"--cutoffs={c}" for c in result.cutoffs)
    assert 0 < result.cutoffs[0] < result.cutoffs[1] < freqs.size


@pytest.mark.parametrize(
    ("freqs", "clusters", "message"),
    [
        ([], 2, "empty"),
        ([1.0, -2.0, 3.0], 2, ">= 0"),
        ([1.0, float("nan")], 1, "NaN"),
        ([0.0, 0.0, 0.0], 2, "zero"),
        ([3.0, 2.0, 1.0], 3, "num_clusters"),
        ([3.0, 2.0, 1.0], 0, "num_clusters"),
    ],
)
def test_invalid_inputs_are_rejected(freqs, clusters, message):
    with pytest.raises(ValueError, match=message):
        optimal_cutoffs(freqs, clusters)


def test_invalid_options_are_rejected():
    with pytest.raises(ValueError, match="unknown cost"):
        optimal_cutoffs([3.0, 2.0, 1.0], 2, cost="gpu")
    with pytest.raises(ValueError, match="increase"):
        partition_cost([3.0, 2.0, 1.0], [2, 2])


def test_read_values_and_pairs(tmp_path):
    values = tmp_path / "probs.txt"
    values.write_text("0.5\n0.25\n\n0.125 0.125\n")
    freqs, tokens = read_frequencies(values)
    np.testing.assert_array_equal(freqs, [0.5, 0.25, 0.125, 0.125])
    assert tokens is None

    pairs = tmp_path / "counts.txt"
    pairs.write_text("the 120\nof 80\n, 95\n")
    freqs, tokens = read_frequencies(pairs)
    np.testing.assert_array_equal(freqs, [120, 80, 95])
    assert tokens == ["the", "of", ","]
    # The same two-column file read as plain values fails on the token column.
    with pytest.raises(ValueError, match="not a number"):
        read_frequencies(pairs, fmt="values")


def test_read_rejects_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_frequencies(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(ValueError, match="empty"):
        read_frequencies(empty)
    dup = tmp_path / "dup.txt"
    dup.write_text("a 1\nb 2\na 3\n")
    with pytest.raises(ValueError, match="appears twice"):
        read_frequencies(dup)
