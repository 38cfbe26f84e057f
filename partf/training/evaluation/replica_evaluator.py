"""`Evaluator` for a model trained under a `tf.distribute` strategy: each replica scores
its own rows (`partf.training.distribution`: replica k holds rows [k*b, (k+1)*b) of every
batch and the memory of those streams), and the NLL and token sums are added over
replicas, so the figures equal those of one device with the same global batch.

Example:
    >>> evaluator = ReplicaEvaluator(model, strategy, global_batch=32)
    >>> stats = evaluator.evaluate(valid_dataset)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from partf.layers.candidates import check_eval_mode
from partf.training.distribution import distribute_rows
from partf.training.evaluation.perplexity import Progress, SplitStats, batch_nll_sums, chunk_size

if TYPE_CHECKING:
    import tensorflow as tf


class ReplicaEvaluator:
    """`Evaluator` for a model built under a strategy: each replica scores its rows.

    Same contract as `partf.training.evaluation.perplexity.Evaluator`: `evaluate(dataset)` makes one
    pass with the evaluation memory starting empty and returns exact `SplitStats`
    (NLL and token sums over every replica; the original's per-batch figure from the
    batch's global sums).

    Args:
        model: a partf model built under `strategy.scope()`.
        strategy: the strategy.
        global_batch: B, rows per batch of the datasets to score.
        jit_compile: compile the per-replica function with XLA.
        mode: a search's block weights, "argmax", "expected" or "sample"; None: the
            model's own `eval_mode` (as `Evaluator`).
        accuracy: also count the targets predicted exactly (as `Evaluator`).
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

        if mode is not None:
            check_eval_mode(mode)
        self.model = model
        self.strategy = strategy
        self.global_batch = global_batch
        self.mode = mode
        self.accuracy = accuracy

        def batch_sums(inputs, targets):
            # This replica's rows.
            return batch_nll_sums(model, inputs, targets, mode, accuracy)

        replica_step = tf.function(batch_sums, jit_compile=jit_compile, reduce_retracing=True)

        def run(iterator, num_batches):
            total = tf.constant(0.0, tf.float64)
            count = tf.constant(0.0, tf.float64)
            exp_sum = tf.constant(0.0, tf.float64)
            correct = tf.constant(0.0, tf.float64)
            for _ in tf.range(num_batches):
                t, c, r = strategy.run(replica_step, args=next(iterator))
                t = tf.cast(strategy.reduce("SUM", t, axis=None), tf.float64)
                c = tf.cast(strategy.reduce("SUM", c, axis=None), tf.float64)
                total += t
                count += c
                exp_sum += tf.exp(t / tf.maximum(c, 1.0))
                correct += tf.cast(strategy.reduce("SUM", r, axis=None), tf.float64)
            return total, count, exp_sum, correct

        self._run = tf.function(run)

    def evaluate(self, dataset: tf.data.Dataset, progress: Progress | None = None) -> SplitStats:
        """One pass over `dataset` ((inputs, targets) int32 [B, T]), memory starting empty;
        `progress` is called with the batches done after each chunk of the pass."""
        import tensorflow as tf

        num_batches = int(dataset.cardinality())
        if num_batches < 0:
            num_batches = int(dataset.reduce(0, lambda n, _: n + 1))
        self.model.reset_state("eval")
        iterator = iter(distribute_rows(self.strategy, dataset, self.global_batch))
        # Chunks of the pass through the same loop: the iterator and the memory carry.
        sums, done, size = [0.0, 0.0, 0.0, 0.0], 0, chunk_size(num_batches)
        while done < num_batches:
            n = min(size, num_batches - done)
            # (NLL, tokens, sum of exp, correct) sums
            chunk = self._run(iterator, tf.constant(n))
            sums = [a + float(b) for a, b in zip(sums, chunk, strict=True)]
            done += n
            if progress:
                progress(done)
        self.model.reset_state("eval")
        return SplitStats(
            total_nll=sums[0],
            num_tokens=int(round(sums[1])),
            num_batches=num_batches,
            sum_exp_batch_loss=sums[2],
            num_correct=int(round(sums[3])) if self.accuracy else None,
        )
