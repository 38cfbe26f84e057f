"""`Evaluator` for a model trained under a `tf.distribute` strategy: each replica scores
its own rows (`partf.training.distribution`: replica k holds rows [k*b, (k+1)*b) of every
batch and the memory of those streams), and each batch's sums are added over replicas,
so the figures equal those of one device with the same global batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from partf.training.distribution import distribute_rows
from partf.training.evaluation.perplexity import BaseEvaluator, chunk_size

if TYPE_CHECKING:
    import tensorflow as tf


class ReplicaEvaluator(BaseEvaluator):
    """`Evaluator` for a model built under a strategy: each replica scores its rows.

    Arguments as `Evaluator`'s, and:
        model: a partf model built under `strategy.scope()`.
        global_batch: B, rows per batch of the datasets to score.
    """

    def __init__(
        self,
        model: Any,
        strategy: tf.distribute.Strategy,
        global_batch: int,
        jit_compile: bool = True,
        mode: str | None = None,
        accuracy: bool = False,
    ) -> None:
        import tensorflow as tf

        super().__init__(model, mode, accuracy)
        self.strategy = strategy
        self.global_batch = global_batch
        replica_step = tf.function(self.batch_sums, jit_compile=jit_compile, reduce_retracing=True)

        def run(iterator, num_batches):
            # float32 [num_batches, 3]: each batch's sums over every replica's rows.
            sums = tf.TensorArray(tf.float32, size=num_batches)
            for i in tf.range(num_batches):
                per_replica = strategy.run(replica_step, args=next(iterator))
                total = [strategy.reduce("SUM", s, axis=None) for s in per_replica]
                sums = sums.write(i, tf.stack(total))
            return sums.stack()

        self._run = tf.function(run)

    def _chunks(self, dataset: tf.data.Dataset) -> Iterator[Any]:
        import tensorflow as tf

        num_batches = int(dataset.cardinality())
        if num_batches < 0:
            num_batches = int(dataset.reduce(0, lambda n, _: n + 1))
        iterator = iter(distribute_rows(self.strategy, dataset, self.global_batch))
        # Chunks of the pass through the same loop: the iterator and the memory carry.
        size = chunk_size(num_batches)
        for done in range(0, num_batches, size):
            yield np.asarray(self._run(iterator, tf.constant(min(size, num_batches - done))))
