"""Optimal adaptive-softmax cutoffs: an exact dynamic programme over unigram frequencies.

An adaptive softmax (Grave et al., 2017) splits a vocabulary sorted by frequency into
contiguous clusters: a head evaluated for every token and tail clusters evaluated only
for the tokens that fall in them. Choosing where to cut is a one-dimensional partition
problem. With ``p`` the frequencies in vocabulary order and ``F`` their prefix sums, a
cluster holding positions ``i+1 .. j`` costs::

    w(i, j) = (j - i) * (F[j + 1] - F[i + 1])      # columns x probability mass

which is the linear regime of the paper's timing model (a matrix product with ``k``
columns over ``p * B`` rows costs about ``lambda * k * p * B``). Two costs are offered:

- ``"original"`` (default): every cluster, the head included, costs ``w``. This is the
  objective of the original project's ``optimal_cuts.py`` (Jmkernes/PAR-Transformer-XL).
- ``"paper"``: the head is evaluated for every token and also holds one column per
  tail cluster, so it costs ``(head_size + num_clusters - 1) * total``; tails cost ``w``.

Both are reported divided by the total mass: the expected number of output columns
computed per target token (a full softmax costs the vocabulary size).

Why the search is fast and still exact: ``w(i, j)`` is the sum of ``p[t]`` over all pairs
``(s, t)`` in the square ``(i, j] x (i, j]``, so for ``a <= b <= c <= d``::

    w(a, d) + w(b, c) - w(a, c) - w(b, d) = sum over (a, b] x (c, d] and (c, d] x (a, b] >= 0

(the quadrangle inequality). Hence the largest optimal split point of each dynamic
programming layer is non-decreasing in the right end ``j`` (Monge property), and each
layer is solved by divide and conquer in ``O(N log N)`` instead of ``O(N^2)``. The
divide and conquer runs breadth first, one vectorised numpy pass per level. Ties are
broken towards the largest split point, as in the original, and each candidate value is
computed with the original's float64 formula. With integer counts (while ``N`` times the
total stays below 2**53) every value is exact and both programs find the same cutoffs;
with probabilities, only a near-tie within rounding error could resolve differently, at
a cost difference of the order of that rounding. The paper's flat region for small
matrix products is not modelled: the search assumes the linear regime.

Reference: Grave, Joulin, Cisse, Grangier, Jegou, "Efficient softmax approximation for
GPUs", ICML 2017, https://arxiv.org/abs/1609.04309.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

COSTS = ("original", "paper")


@dataclasses.dataclass(frozen=True)
class CutoffResult:
    """The optimal partition found by `optimal_cutoffs`.

    Attributes:
        cutoffs: increasing cluster boundaries without the vocabulary size: the head
            holds positions ``[0, cutoffs[0])``, tail ``k`` holds
            ``[cutoffs[k-1], cutoffs[k])``, the last tail ends at the vocabulary size.
            Positions are frequency ranks when the search sorted the frequencies,
            otherwise indices into the input.
        cost: expected output columns computed per token under the chosen cost.
        vocab_size: number of frequencies searched.
        sorted: whether the positions are frequency ranks.
        cost_name: ``"original"`` or ``"paper"``.
    """

    cutoffs: tuple[int, ...]
    cost: float
    vocab_size: int
    sorted: bool
    cost_name: str

    def flags(self) -> str:
        """The cutoffs as training flags, e.g. ``--cutoffs=2000 --cutoffs=6000``."""
        return " ".join(f"--cutoffs={c}" for c in self.cutoffs)


def _check_frequencies(frequencies: Sequence[float] | np.ndarray) -> np.ndarray:
    freqs = np.asarray(frequencies, dtype=np.float64)
    if freqs.ndim != 1:
        raise ValueError(f"frequencies must be a 1-D list, got shape {freqs.shape}; flatten them")
    if freqs.size == 0:
        raise ValueError("no frequencies given: the counts are empty; pass a non-empty vocabulary")
    if not np.all(np.isfinite(freqs)):
        raise ValueError("frequencies contain NaN or infinity; pass finite counts")
    if np.any(freqs < 0):
        raise ValueError(
            f"frequencies must be >= 0, found {freqs.min()}; pass counts or probabilities"
        )
    if not freqs.sum() > 0:
        raise ValueError("all frequencies are zero; count tokens from non-empty data")
    return freqs


def _check_clusters(num_clusters: int, vocab_size: int) -> None:
    if not 1 <= num_clusters < vocab_size:
        raise ValueError(
            f"num_clusters must be in [1, {vocab_size - 1}] for a vocabulary of {vocab_size}, "
            f"got {num_clusters}; use fewer clusters"
        )


def _check_cost(cost: str) -> None:
    if cost not in COSTS:
        raise ValueError(f"unknown cost {cost!r}; choose one of {', '.join(COSTS)}")


def _head_layer(prefix: np.ndarray, num_clusters: int, cost: str) -> np.ndarray:
    """Cost of a single cluster (the head) covering positions ``0 .. j``, for every j."""
    n = prefix.size - 1
    sizes = np.arange(1, n + 1)
    if cost == "original":
        # Same expression as the original, so the floats agree bit for bit.
        return prefix[1:] * sizes
    return (sizes + (num_clusters - 1)) * prefix[-1]


def _next_layer(prev: np.ndarray, prefix: np.ndarray, first: int) -> tuple[np.ndarray, np.ndarray]:
    """One dynamic-programming layer: add a tail cluster after the best prefix partition.

    Computes, for every right end ``j >= first + 1``,
    ``best[j] = min_{first <= i < j} prev[i] + (j - i) * (F[j+1] - F[i+1])`` and the largest
    minimising ``i``, by breadth-first divide and conquer over the monotone split points.

    Args:
        prev: ``[N]`` cost of the best partition of positions ``0 .. i`` into the clusters
            so far (``inf`` where impossible).
        prefix: ``[N + 1]`` prefix sums of the frequencies, ``prefix[0] = 0``.
        first: smallest valid split point (clusters so far minus one).

    Returns:
        ``best`` ``[N]`` (``inf`` where impossible) and ``split`` ``[N]`` int64 (``-1``
        where impossible).
    """
    n = prev.size
    best = np.full(n, np.inf)
    split = np.full(n, -1, dtype=np.int64)
    # Each pending segment: right ends lo_j..hi_j whose split points lie in lo_i..hi_i.
    lo_j = np.array([first + 1])
    hi_j = np.array([n - 1])
    lo_i = np.array([first])
    hi_i = np.array([n - 2])
    while lo_j.size:
        mid = (lo_j + hi_j) // 2
        top = np.minimum(hi_i, mid - 1)  # a split must leave the new cluster non-empty
        counts = top - lo_i + 1
        starts = np.zeros(counts.size, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        total = int(starts[-1] + counts[-1])
        segment = np.repeat(np.arange(counts.size), counts)
        cand = lo_i[segment] + (np.arange(total) - starts[segment])  # split points i
        j = mid[segment]
        # The original's formula, term for term: d[i] + (j - i) * (F[j+1] - F[i+1]).
        values = prev[cand] + (j - cand) * (prefix[j + 1] - prefix[cand + 1])
        seg_min = np.minimum.reduceat(values, starts)
        # Largest minimiser of each segment (ties go to the later split, like `<=`).
        at_min = np.where(values == seg_min[segment], np.arange(total), -1)
        arg = cand[np.maximum.reduceat(at_min, starts)]
        best[mid] = seg_min
        split[mid] = arg
        # Left halves keep split points <= arg, right halves >= arg.
        left = mid > lo_j
        right = mid < hi_j
        lo_j, hi_j, lo_i, hi_i = (
            np.concatenate([lo_j[left], mid[right] + 1]),
            np.concatenate([mid[left] - 1, hi_j[right]]),
            np.concatenate([lo_i[left], arg[right]]),
            np.concatenate([arg[left], hi_i[right]]),
        )
    return best, split


def optimal_cutoffs(
    frequencies: Sequence[float] | np.ndarray,
    num_clusters: int,
    *,
    sort: bool = True,
    cost: str = "original",
) -> CutoffResult:
    """Finds the adaptive-softmax cutoffs of least expected cost, exactly.

    Args:
        frequencies: ``[N]`` non-negative unigram counts or probabilities, one per token.
        num_clusters: number of clusters including the head, ``1 <= K < N``.
        sort: sort the frequencies in decreasing order first (as the original does); the
            cutoffs are then frequency ranks. With ``False`` the input order is kept, which
            is what an adaptive softmax over token ids uses when ids are not sorted by
            frequency.
        cost: ``"original"`` or ``"paper"`` (see the module docstring).

    Returns:
        A `CutoffResult` with ``K - 1`` cutoffs and the cost per token.

    Raises:
        ValueError: empty, negative, non-finite or all-zero frequencies, ``K`` outside
            ``[1, N)``, or an unknown cost.

    Example:
        >>> optimal_cutoffs([50, 20, 10, 5, 5, 4, 3, 2, 1], 2).cutoffs
        (2,)

    Reference: Grave et al., "Efficient softmax approximation for GPUs", ICML 2017.
    """
    freqs = _check_frequencies(frequencies)
    n = freqs.size
    _check_clusters(num_clusters, n)
    _check_cost(cost)
    if sort:
        freqs = np.sort(freqs)[::-1]
    # Sequential float64 prefix sums, accumulated in the same order as the original.
    prefix = np.concatenate([[0.0], np.cumsum(freqs)])

    layer = _head_layer(prefix, num_clusters, cost)
    splits = []
    for clusters_so_far in range(1, num_clusters):
        layer, split = _next_layer(layer, prefix, first=clusters_so_far - 1)
        splits.append(split)

    # Walk back from the last position through each layer's split point.
    ends = []
    j = n - 1
    for split in reversed(splits):
        j = int(split[j])
        ends.append(j)
    cutoffs = tuple(end + 1 for end in reversed(ends))
    return CutoffResult(
        cutoffs=cutoffs,
        cost=float(layer[n - 1] / prefix[-1]),
        vocab_size=n,
        sorted=sort,
        cost_name=cost,
    )


def partition_cost(
    frequencies: Sequence[float] | np.ndarray,
    cutoffs: Sequence[int],
    *,
    cost: str = "original",
) -> float:
    """Expected output columns per token of given cutoffs, in the order the frequencies are.

    Args:
        frequencies: ``[N]`` non-negative counts or probabilities in vocabulary order.
        cutoffs: increasing boundaries in ``(0, N)``, without ``N`` itself.
        cost: ``"original"`` or ``"paper"``.

    Returns:
        The cost divided by the total mass (a full softmax costs ``N``).

    Example:
        >>> partition_cost([3, 1], [1])
        1.0
    """
    freqs = _check_frequencies(frequencies)
    _check_cost(cost)
    n = freqs.size
    bounds = [0, *[int(c) for c in cutoffs], n]
    if any(a >= b for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"cutoffs must increase strictly inside (0, {n}), got {list(cutoffs)}")
    total = math.fsum(freqs)
    spent = 0.0
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        mass = math.fsum(freqs[a:b])
        if k == 0 and cost == "paper":
            spent += (b - a + len(bounds) - 2) * total
        else:
            spent += (b - a) * mass
    return spent / total


def read_frequencies(path: str | Path, *, fmt: str = "auto") -> tuple[np.ndarray, list[str] | None]:
    """Reads unigram frequencies from a text file.

    Two layouts are understood:

    - ``values``: numbers separated by white space, typically one per line (the original
      project's format; counts or probabilities, in any order).
    - ``pairs``: ``token count`` lines, e.g. a token-count dump; tokens are kept in
      file order and must be unique.

    With ``fmt="auto"`` a file whose non-empty lines all have exactly two fields is read as
    pairs, anything else as values.

    Args:
        path: the text file.
        fmt: ``"auto"``, ``"values"`` or ``"pairs"``.

    Returns:
        ``(frequencies [N], tokens)``; ``tokens`` is ``None`` for ``values``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: unknown format, unparsable numbers, duplicate tokens or an empty file.

    Example:
        >>> # a file holding "the 120\\nof 80\\n" gives (array([120., 80.]), ['the', 'of'])
    """
    if fmt not in ("auto", "values", "pairs"):
        raise ValueError(f"unknown format {fmt!r}; choose auto, values or pairs")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"counts file {path} does not exist; check the path")
    rows = [line.split() for line in path.read_text(encoding="utf-8").splitlines()]
    rows = [row for row in rows if row]
    if not rows:
        raise ValueError(f"counts file {path} is empty; write one count per line")
    if fmt == "auto":
        fmt = "pairs" if all(len(row) == 2 for row in rows) else "values"

    def number(text: str, line: int) -> float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(
                f"{path}:{line}: {text!r} is not a number; expected counts or probabilities"
            ) from None

    if fmt == "values":
        values = [number(text, n) for n, row in enumerate(rows, 1) for text in row]
        return np.asarray(values, dtype=np.float64), None
    tokens, values = [], []
    for n, row in enumerate(rows, 1):
        if len(row) != 2:
            raise ValueError(f"{path}:{n}: expected 'token count', got {' '.join(row)!r}")
        tokens.append(row[0])
        values.append(number(row[1], n))
    if len(set(tokens)) != len(tokens):
        seen: set[str] = set()
        dup = next(t for t in tokens if t in seen or seen.add(t))
        raise ValueError(f"{path}: token {dup!r} appears twice; merge its counts into one line")
    return np.asarray(values, dtype=np.float64), tokens
