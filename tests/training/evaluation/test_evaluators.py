"""`make_evaluator`: the evaluator for the backend and strategy, with the block weights
and the accuracy count asked for (the JAX branch runs in tests/test_jax_backend.py, in a
JAX process)."""

from __future__ import annotations

import tensorflow as tf

from partf.training.evaluation.evaluators import make_evaluator
from partf.training.evaluation.perplexity import Evaluator
from partf.training.evaluation.replica_evaluator import ReplicaEvaluator
from tests.training.evaluation.helpers import B, tiny_model


def test_one_device_gets_evaluator_and_a_strategy_the_replica_evaluator():
    model = tiny_model()
    plain = make_evaluator(model, None, B, jit_compile=False, mode="expected", accuracy=True)
    assert type(plain) is Evaluator
    assert (plain.jit_compile, plain.mode, plain.accuracy) == (False, "expected", True)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        distributed_model = tiny_model()
    replicas = make_evaluator(distributed_model, strategy, B, mode="argmax")
    assert type(replicas) is ReplicaEvaluator
    assert (replicas.strategy, replicas.global_batch, replicas.mode) == (strategy, B, "argmax")
    assert replicas.accuracy is False
