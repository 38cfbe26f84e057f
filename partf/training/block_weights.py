"""Scoring a search with other block weights than its own `eval_mode`.

A search evaluates with each block's argmax candidate (`eval_mode="argmax"`, the default).
While pi has not moved (the first `--arch_freeze_steps` updates: half of `--search=par`'s
run) the argmax of a uniform pi is each block's *first* candidate, so the "argmax model"
is the all-attention stack, a network the mixture training never runs alone (on the
original's train records it scored 64.44 at epoch 5, where the original protocol's run
stood at 50.60: docs/results.md). `ModeEvaluator` scores the same weights with another
mode (the expected mixture: what is being trained) by setting the blocks' `eval_mode`
around each evaluation, so any tracing it causes sees that mode and the model's own
evaluator keeps its own.

Example:
    >>> expected = ModeEvaluator(make_evaluator(model, None, 32), model, "expected")
    >>> stats = expected.evaluate(valid_dataset)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from partf.layers.candidates import check_eval_mode


def mixed_blocks(model: Any) -> list[Any]:
    """The blocks of `model` that mix candidates (a search's; none in a fixed model)."""
    return [b for b in getattr(model, "blocks", []) if getattr(b, "num_candidates", 1) > 1]


@contextlib.contextmanager
def block_weights(model: Any, mode: str) -> Iterator[None]:
    """Evaluates `model`'s mixed blocks with `mode` weights inside the block, restoring
    each block's own mode after.

    Raises:
        ValueError: `mode` is not one of `EVAL_MODES`.
    """
    check_eval_mode(mode)
    blocks = mixed_blocks(model)
    before = [b.eval_mode for b in blocks]
    for block in blocks:
        block.eval_mode = mode
    try:
        yield
    finally:
        for block, own in zip(blocks, before, strict=True):
            block.eval_mode = own


class ModeEvaluator:
    """An evaluator (`partf.training.distribution.make_evaluator`'s) that scores with
    `mode` block weights: a second evaluator of the same model, whose compiled functions
    are traced, and always run, inside `block_weights(model, mode)`.

    Args:
        evaluator: a fresh evaluator of `model`, used only through this wrapper.
        model: the model it scores.
        mode: "argmax", "expected" or "sample".
    """

    def __init__(self, evaluator: Any, model: Any, mode: str) -> None:
        check_eval_mode(mode)  # here too, so a wrong mode fails when built, not when first used
        self.evaluator = evaluator
        self.model = model
        self.mode = mode

    def evaluate(self, dataset: Any, progress: Any = None) -> Any:
        """The split's `SplitStats` with `mode` block weights (`progress`: the evaluator's)."""
        with block_weights(self.model, self.mode):
            return self.evaluator.evaluate(dataset, progress=progress)


def expected_evaluator(model: Any, make: Any) -> ModeEvaluator | None:
    """A `ModeEvaluator` with expected weights for a search that evaluates by argmax;
    None otherwise (a fixed model, or a search evaluated by "expected" or "sample",
    which need no stand-in).

    Args:
        model: the run's model.
        make: () -> a fresh evaluator of `model`.
    """
    blocks = mixed_blocks(model)
    if not blocks or any(b.eval_mode != "argmax" for b in blocks):
        return None
    return ModeEvaluator(make(), model, "expected")
