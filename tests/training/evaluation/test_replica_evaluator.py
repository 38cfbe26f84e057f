"""`ReplicaEvaluator`: under a `tf.distribute` strategy each replica scores its rows and
the sums are added, to the figures one device gives (here a one-device
`MirroredStrategy`, in this process; tests/training/test_distribution.py trains on two)."""

from __future__ import annotations

import pytest
import tensorflow as tf

from partf.training.evaluation.perplexity import Evaluator
from partf.training.evaluation.replica_evaluator import ReplicaEvaluator
from tests.training.evaluation.helpers import B, batches, tiny_model


def same_figures(got, want) -> bool:
    counts = ("num_tokens", "num_batches", "num_correct")
    sums = ("total_nll", "sum_exp_batch_loss")
    return all(getattr(got, c) == getattr(want, c) for c in counts) and all(
        getattr(got, s) == pytest.approx(getattr(want, s), rel=1e-6) for s in sums
    )


def test_the_replicas_sums_are_the_one_device_figures():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = tiny_model()
    alone = tiny_model()
    alone.set_weights(model.get_weights())
    want = Evaluator(alone, jit_compile=False, accuracy=True).evaluate(batches(3))
    done = []
    evaluator = ReplicaEvaluator(model, strategy, B, jit_compile=False, accuracy=True)
    got = evaluator.evaluate(batches(3), progress=done.append)
    assert same_figures(got, want) and got.num_batches == 3 and got.num_correct is not None
    assert done == [3]
    # A second pass starts from empty memory again: the same figures.
    assert same_figures(evaluator.evaluate(batches(3)), want)
