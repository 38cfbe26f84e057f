"""`Evaluator` for the JAX backend; needs no TensorFlow.

`partf.training.evaluation.perplexity.Evaluator` runs the model inside `tf.function`. On JAX each
batch is instead one `jax.jit`-compiled pure function of all the model's variables, run
through `keras.StatelessScope`; the evaluation memory it writes is carried to the next
batch by hand. A split is scored a chunk of up to `CHUNK` batches per call, each a
`jax.lax.scan` over its batches (stacked on the host first; the last chunk padded to the
same length), carrying the states from call to call: on an accelerator nothing waits for
Python between the batches of a chunk, like `Evaluator`'s compiled loop, and between
chunks the pass reports its progress. Compiled once per chunk length. Same contract and
figures as `Evaluator`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import keras
import numpy as np
from keras import ops

from partf.training.evaluation.perplexity import BaseEvaluator, chunk_size, stacked_chunks


class JaxEvaluator(BaseEvaluator):
    """Scores splits with a model's evaluation memory, starting empty each time (JAX).
    Arguments as `Evaluator`'s; `jit_compile` compiles with `jax.jit`."""

    def __init__(
        self,
        model: Any,
        jit_compile: bool = True,
        mode: str | None = None,
        accuracy: bool = False,
    ) -> None:
        import jax

        super().__init__(model, mode, accuracy)

        def batch_sums(weights, states, inputs, targets):
            mapping = list(zip(model.trainable_variables, weights, strict=True))
            mapping += list(zip(model.non_trainable_variables, states, strict=True))
            with keras.StatelessScope(state_mapping=mapping) as scope:
                sums = self.batch_sums(inputs, targets)
            new_states = []
            for variable, value in zip(model.non_trainable_variables, states, strict=True):
                current = scope.get_current_value(variable)
                new_states.append(value if current is None else current)
            return ops.stack(sums), new_states

        def run(weights, states, inputs, targets):
            # The whole split in one call: a scan over its batches carrying the
            # non-trainable variables (the evaluation memory among them) from each batch
            # to the next; the weights are constants of the loop, not carried.
            def body(carry, batch):
                pair, carry = batch_sums(weights, carry, *batch)
                return carry, pair

            states, pairs = jax.lax.scan(body, states, (inputs, targets))
            return pairs, states

        self._run = jax.jit(run) if jit_compile else run
        self._device_get = jax.device_get

    def _chunks(self, dataset: Any) -> Iterator[Any]:
        # `dataset`: a `tf.data.Dataset` or any iterable of numpy (inputs, targets) batches.
        batches: Iterable[Any] = (
            dataset.as_numpy_iterator() if hasattr(dataset, "as_numpy_iterator") else dataset
        )
        pairs = [(np.asarray(x), np.asarray(y)) for x, y in batches]
        weights = [v.value for v in self.model.trainable_variables]
        states = [v.value for v in self.model.non_trainable_variables]
        # A scan per chunk of equal length (one compiled program), the states carried.
        for inputs, targets, real in stacked_chunks(pairs, chunk_size(len(pairs))):
            sums, states = self._run(weights, states, inputs, targets)
            yield self._device_get(sums)[:real]  # [real, SUMS]
