"""Scoring a split: exact perplexity and the figures other papers report, on every backend.

- `perplexity`: the figures of a split (`SplitStats`, `perplexity_report`), `score` (a
  pass with progress on the console) and `Evaluator`, the TensorFlow evaluator.
- `jax_evaluator`: `JaxEvaluator`, the same on JAX without TensorFlow.
- `replica_evaluator`: `ReplicaEvaluator`, the same under a `tf.distribute` strategy.
- `evaluators`: `make_evaluator`, the evaluator for a model's backend and strategy.
- `block_weights`: scoring a search with other block weights than its own `eval_mode`.
- `recall_distance`: an MQAR split's accuracy by the distance from each key's pair to
  its query.
"""
