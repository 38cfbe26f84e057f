"""Scoring a search with other block weights than its own `eval_mode`.

A search evaluates with each block's argmax candidate (`eval_mode="argmax"`, the default).
While pi has not moved (the first `--arch_freeze_steps` updates: half of `--search=par`'s
run) the argmax of a uniform pi is each block's *first* candidate, so the "argmax model"
is the all-attention stack, a network the mixture training never runs alone (on the
original's train records it scored 64.44 at epoch 5, where the original protocol's run
stood at 50.60: docs/results.md). `expected_evaluator` builds a second evaluator of the
same model that scores with the expected mixture (what is being trained): the evaluators
take the block weights as an argument (`mode`) and pass it into every model call they
compile, so the model's own evaluator keeps its own weights and nothing on the model is
changed around a call.

Example:
    >>> expected = expected_evaluator(
    ...     model, lambda mode: make_evaluator(model, None, 32, mode=mode)
    ... )
    >>> stats = expected.evaluate(valid_dataset)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def mixed_blocks(model: Any) -> list[Any]:
    """The blocks of `model` that mix candidates (a search's; none in a fixed model)."""
    return [b for b in getattr(model, "blocks", []) if getattr(b, "num_candidates", 1) > 1]


def expected_evaluator(model: Any, make: Callable[[str], Any]) -> Any | None:
    """`make("expected")` (`make`: mode -> a fresh evaluator of `model` scoring with those
    block weights) for a search that evaluates by argmax; None otherwise (a fixed model,
    or a search evaluated by "expected" or "sample", which need no stand-in)."""
    blocks = mixed_blocks(model)
    if not blocks or any(b.eval_mode != "argmax" for b in blocks):
        return None
    return make("expected")
