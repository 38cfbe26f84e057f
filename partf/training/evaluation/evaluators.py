"""Which evaluator scores a model: the one for its backend and strategy.

Every evaluator has the same contract, `evaluate(dataset, progress) -> SplitStats` (one
pass, the evaluation memory starting empty), so the trainer, `partf-evaluate` and the
drop selection score through `make_evaluator` whatever runs underneath.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import keras

from partf.training.evaluation.jax_evaluator import JaxEvaluator
from partf.training.evaluation.replica_evaluator import ReplicaEvaluator

if TYPE_CHECKING:
    import tensorflow as tf


def make_evaluator(
    model: Any,
    strategy: tf.distribute.Strategy | None,
    global_batch: int,
    jit_compile: bool = True,
    mode: str | None = None,
    accuracy: bool = False,
) -> Any:
    """The evaluator for this backend and strategy: `Evaluator` (TensorFlow, one device),
    `ReplicaEvaluator` (a strategy) or `JaxEvaluator` (JAX), scoring a search with
    `mode` block weights ("argmax", "expected" or "sample"; None: its own `eval_mode`),
    counting the targets predicted exactly with `accuracy` (a recall task's score)."""
    from partf.training.evaluation.perplexity import Evaluator

    if strategy is not None:
        return ReplicaEvaluator(model, strategy, global_batch, jit_compile, mode, accuracy)
    if keras.backend.backend() == "jax":
        return JaxEvaluator(model, jit_compile, mode, accuracy)
    return Evaluator(model, jit_compile=jit_compile, mode=mode, accuracy=accuracy)
