"""Adaptive softmax: a cheap output layer for a large, Zipf-shaped vocabulary.

The vocabulary (sorted by decreasing frequency) is split by `cutoffs` into a
head of frequent tokens and tail clusters. The head softmax covers the head
tokens plus one entry per tail cluster; a token of cluster i has probability
p_head(cluster i) * p_tail_i(token). Rarer clusters see the hidden state
through a smaller projection (d_model / proj_factor**i).

Reference: Grave et al., "Efficient softmax approximation for GPUs", ICML 2017.
https://arxiv.org/abs/1609.04309
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from partf.serialization import register


def validate_cutoffs(cutoffs: Sequence[int], vocab_size: int | None) -> tuple[int, ...]:
    """Checks adaptive-softmax cutoffs; returns them as a tuple.

    Cutoffs are the first token id of each tail cluster, so they must be
    strictly increasing integers in (0, vocab_size): every cluster, the head
    included, then holds at least one token. The vocabulary size itself is
    not a cutoff (the original project's convention). A `vocab_size` of None (a
    run's model before its data is read) checks all but the bound.
    """
    cutoffs = tuple(int(c) for c in cutoffs)
    if vocab_size is not None and vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}.")
    if any(c <= 0 for c in cutoffs):
        raise ValueError(f"cutoffs must be positive, got {list(cutoffs)}.")
    if any(b <= a for a, b in zip(cutoffs, cutoffs[1:], strict=False)):
        raise ValueError(
            f"cutoffs must be sorted and unique, got {list(cutoffs)}; e.g. {sorted(set(cutoffs))}."
        )
    if cutoffs and vocab_size is not None and cutoffs[-1] >= vocab_size:
        raise ValueError(
            f"cutoffs must be below vocab_size={vocab_size} (do not list the vocab size), "
            f"got {list(cutoffs)}."
        )
    return cutoffs


def tail_projection_dims(
    d_model: int, num_tails: int, proj_factor: int = 4, proj_dims: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Width of each tail cluster's projection: proj_dims, or d_model // proj_factor**i."""
    if proj_dims:
        dims = tuple(int(d) for d in proj_dims)
        if len(dims) != num_tails:
            raise ValueError(
                f"proj_dims has {len(dims)} entries but there are {num_tails} tail clusters "
                "(one per cutoff); give one width per cutoff or leave proj_dims empty."
            )
        if any(d <= 0 for d in dims):
            raise ValueError(f"proj_dims must be positive, got {list(dims)}.")
        return dims
    if proj_factor < 1:
        raise ValueError(f"proj_factor must be >= 1, got {proj_factor}.")
    return tuple(max(1, d_model // proj_factor**i) for i in range(1, num_tails + 1))


def _block_sizes(positions: int) -> list[int]:
    """Static row counts a tail cluster may be scored on: N/8, N/4, N/2 and N."""
    return sorted({max(1, math.ceil(positions / 2**k)) for k in range(4)})


def _cross_entropy(targets: Any, logits: Any) -> Any:
    """-log softmax(logits)[target]: [...], [..., N] -> [...], in one fused kernel where the
    backend has one (TensorFlow's), much cheaper than a log-softmax and a gather."""
    return ops.sparse_categorical_crossentropy(targets, logits, from_logits=True)


@register
class AdaptiveSoftmax(keras.layers.Layer):
    """Adaptive softmax over `vocab_size` tokens; plain softmax without cutoffs. A call
    (and `log_probs`) maps hidden [..., D] to float32 [..., V] log-probabilities. All
    maths is float32 (build it with a float32 dtype policy under mixed precision).

    Args:
        vocab_size: number of tokens V (ids sorted by decreasing frequency).
        cutoffs: first id of each tail cluster, e.g. (250, 2500); () is a plain softmax.
        proj_factor: tail cluster i (from 1) projects to d_model // proj_factor**i.
        proj_dims: explicit tail projection widths, one per cutoff (over proj_factor).
        tie_embeddings: plain softmax only: the output matrix is the input embedding
            table, passed as `tied_kernel` [V, D] to every call; the layer keeps a bias."""

    def __init__(
        self,
        vocab_size: int,
        cutoffs: Sequence[int] = (),
        proj_factor: int = 4,
        proj_dims: Sequence[int] | None = None,
        tie_embeddings: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.cutoffs = validate_cutoffs(cutoffs, self.vocab_size)
        self.proj_factor = int(proj_factor)
        self.proj_dims = None if not proj_dims else tuple(int(d) for d in proj_dims)
        self.tie_embeddings = bool(tie_embeddings)
        if self.tie_embeddings and self.cutoffs:
            raise ValueError(
                "tie_embeddings works with a plain softmax only; set cutoffs=() or "
                "tie_embeddings=False."
            )
        self.num_tails = len(self.cutoffs)
        # Token id range of each tail cluster: [bounds[i], bounds[i + 1]).
        self.bounds = (*self.cutoffs, self.vocab_size)
        # Checks proj_dims against the number of clusters now, not at build.
        tail_projection_dims(1, self.num_tails, self.proj_factor, self.proj_dims)

    @property
    def head_size(self) -> int:
        """Head outputs: the head tokens plus one entry per tail cluster."""
        return (self.cutoffs[0] + self.num_tails) if self.cutoffs else self.vocab_size

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        d_model = int(input_shape[-1])
        if self.tie_embeddings:
            self.head_bias = self.add_weight(
                name="head_bias", shape=(self.vocab_size,), initializer="zeros"
            )
        else:
            self.head = keras.layers.Dense(self.head_size, dtype=self.dtype_policy, name="head")
            self.head.build((None, d_model))
        dims = tail_projection_dims(d_model, self.num_tails, self.proj_factor, self.proj_dims)
        self.tail_projections, self.tail_outputs = [], []
        for i, dim in enumerate(dims):
            projection = keras.layers.Dense(
                dim, use_bias=False, dtype=self.dtype_policy, name=f"tail_{i + 1}_projection"
            )
            projection.build((None, d_model))
            output = keras.layers.Dense(
                self.bounds[i + 1] - self.bounds[i],
                dtype=self.dtype_policy,
                name=f"tail_{i + 1}_output",
            )
            output.build((None, dim))
            self.tail_projections.append(projection)
            self.tail_outputs.append(output)
        self.built = True

    # ------------------------------------------------------------- pieces
    def _head_logits(self, hidden: Any, tied_kernel: Any | None) -> Any:
        if self.tie_embeddings:
            if tied_kernel is None:
                raise ValueError(
                    "this AdaptiveSoftmax has tie_embeddings=True; pass the embedding "
                    "table as tied_kernel."
                )
            kernel = ops.cast(tied_kernel, "float32")  # [V, D]
            logits = ops.einsum("...d,vd->...v", hidden, kernel) + self.head_bias
        else:
            logits = self.head(hidden)
        return ops.cast(logits, "float32")  # [..., head_size]

    def _tail_logits(self, hidden: Any, i: int) -> Any:
        logits = self.tail_outputs[i](self.tail_projections[i](hidden))
        return ops.cast(logits, "float32")  # [..., cluster size]

    # ---------------------------------------------------------------- API
    def log_probs(self, hidden: Any, tied_kernel: Any | None = None) -> Any:
        """Exact log-probabilities of every token: [..., D] -> float32 [..., V]."""
        hidden = ops.cast(hidden, "float32")
        head = ops.log_softmax(self._head_logits(hidden, tied_kernel), axis=-1)
        if not self.num_tails:
            return head
        c0 = self.cutoffs[0]
        pieces = [head[..., :c0]]
        for i in range(self.num_tails):
            tail = ops.log_softmax(self._tail_logits(hidden, i), axis=-1)
            pieces.append(tail + head[..., c0 + i : c0 + i + 1])
        return ops.concatenate(pieces, axis=-1)

    def token_nll(self, hidden: Any, targets: Any, tied_kernel: Any | None = None) -> Any:
        """float32 [...] -log p(target), 0 where target == 0 (padding), never forming [..., V]
        logits. The head's cross-entropy covers every position; tail cluster i is scored
        only on the rows whose target lies in it, gathered into a block of static size (the
        smallest of N/8, N/4, N/2 or N rows that holds them), so shapes stay static under
        XLA while a cluster of rare tokens costs a fraction of the full width. (With
        WikiText-2's 12k vocabulary and cutoffs (250, 2500), 20.6% and 7.8% of the valid
        split's targets fall in the two tails.)"""
        hidden = ops.cast(hidden, "float32")
        targets = ops.cast(targets, "int32")
        if not self.num_tails:
            nll = _cross_entropy(targets, self._head_logits(hidden, tied_kernel))
            return ops.where(targets == 0, 0.0, nll)
        # Cluster of each target: 0 for the head, i + 1 for tail i.
        cluster = sum(ops.cast(targets >= c, "int32") for c in self.cutoffs)
        head_target = ops.where(cluster == 0, targets, self.cutoffs[0] + cluster - 1)
        nll = _cross_entropy(head_target, self._head_logits(hidden, tied_kernel))
        positions = math.prod(targets.shape) if None not in targets.shape else None
        for i in range(self.num_tails):
            if positions is None:  # unknown shape: score the tail everywhere
                size = self.bounds[i + 1] - self.bounds[i]
                local = ops.clip(targets - self.bounds[i], 0, size - 1)
                tail = _cross_entropy(local, self._tail_logits(hidden, i))
                nll = nll + ops.where(cluster == i + 1, tail, 0.0)
                continue
            flat_nll = self._tail_nll_gathered(
                ops.reshape(hidden, (positions, -1)),
                ops.reshape(targets, (positions,)),
                ops.reshape(cluster == i + 1, (positions,)),
                i,
            )
            nll = nll + ops.reshape(flat_nll, ops.shape(targets))
        return ops.where(targets == 0, 0.0, nll)

    def _tail_nll_gathered(self, hidden: Any, targets: Any, member: Any, i: int) -> Any:
        """Tail i's NLL on the member rows, 0 elsewhere: [N, D], [N], bool [N] -> [N].

        The member rows are gathered into a block of static size (see `token_nll`),
        and the gradient is written by hand. Automatic differentiation through
        the block-size switch would keep every branch's logits alive (zero-filled
        for the branches not taken), and that of a gather is a scatter, whose
        XLA CPU code took minutes to compile; the hand-written backward pass uses
        gathers only, and recomputes the block's logits instead of storing them.
        """
        n = targets.shape[0]
        low, size = self.bounds[i], self.bounds[i + 1] - self.bounds[i]
        projected = ops.cast(self.tail_projections[i](hidden), "float32")  # [N, d_i]
        output = self.tail_outputs[i]
        kernel = ops.cast(ops.convert_to_tensor(output.kernel), "float32")  # [d_i, size]
        bias = ops.cast(ops.convert_to_tensor(output.bias), "float32")  # [size]
        local = ops.clip(targets - low, 0, size - 1)
        seen = ops.cumsum(ops.cast(member, "int32"))  # members up to each row
        count = seen[-1]
        sizes = _block_sizes(n)
        # The smallest block that holds every member row.
        choice = sum(ops.cast(count > s, "int32") for s in sizes[:-1])

        def layout(block: int) -> tuple[Any, Any, Any]:
            """Row held by each slot, which slots are used, each row's slot."""
            wanted = ops.arange(block, dtype="int32")[:, None]
            # The j-th member row is the number of rows with at most j members before.
            rows = ops.minimum(ops.sum(ops.cast(seen[None, :] <= wanted, "int32"), axis=1), n - 1)
            used = ops.arange(block, dtype="int32") < count
            slot = ops.clip(seen - 1, 0, block - 1)
            return rows, used, slot

        def forward(block: int):
            def run(projected, kernel, bias):
                rows, used, slot = layout(block)
                logits = ops.matmul(ops.take(projected, rows, axis=0), kernel) + bias
                values = ops.where(used, _cross_entropy(ops.take(local, rows), logits), 0.0)
                return ops.where(member, ops.take(values, slot), 0.0)

            return run

        def backward(block: int):
            def run(upstream, projected, kernel, bias):
                rows, used, slot = layout(block)
                picked = ops.take(projected, rows, axis=0)  # [C, d_i]
                logits = ops.matmul(picked, kernel) + bias
                weight = ops.where(used, ops.take(upstream, rows), 0.0)  # [C]
                target = ops.one_hot(ops.take(local, rows), size, dtype="float32")
                d_logits = (ops.softmax(logits, axis=-1) - target) * weight[:, None]
                d_picked = ops.matmul(d_logits, ops.transpose(kernel))
                d_projected = ops.where(member[:, None], ops.take(d_picked, slot, axis=0), 0.0)
                d_kernel = ops.matmul(ops.transpose(picked), d_logits)
                return d_projected, d_kernel, ops.sum(d_logits, axis=0)

            return run

        @ops.custom_gradient
        def tail_nll(projected, kernel, bias):
            nll = ops.switch(choice, [forward(s) for s in sizes], projected, kernel, bias)

            def grad(*args: Any, upstream: Any = None) -> Any:
                if upstream is None:
                    (upstream,) = args
                branches = [backward(s) for s in sizes]
                return ops.switch(choice, branches, upstream, projected, kernel, bias)

            return nll, grad

        return tail_nll(projected, kernel, bias)

    def call(self, hidden: Any, tied_kernel: Any | None = None) -> Any:
        return self.log_probs(hidden, tied_kernel)

    def compute_output_spec(self, hidden: Any, tied_kernel: Any | None = None) -> Any:
        return keras.KerasTensor((*hidden.shape[:-1], self.vocab_size), dtype="float32")

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            cutoffs=list(self.cutoffs),
            proj_factor=self.proj_factor,
            proj_dims=None if self.proj_dims is None else list(self.proj_dims),
            tie_embeddings=self.tie_embeddings,
        )
        return config
