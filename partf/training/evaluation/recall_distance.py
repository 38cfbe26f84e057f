"""MQAR accuracy by the distance between a key's pair and its query.

A model that recalls some answers and not others shows it here: each answer of an MQAR
split (partf.tasks.mqar) is put in a bucket by its distance, the query's position minus
the position of its key in the pair (`k v ... k`: the key occurs exactly once before
its query), and each bucket counts its answers and those predicted exactly. Buckets are
half-open token ranges, [0, 16), [16, 32), ... by default, and only those holding
answers are returned.

Which answers are right is the evaluator's own test (`predicted_tokens`, `exact_targets`),
on rows scored as the evaluator scores them (stream order, evaluation memory starting
empty), so the buckets add up to the evaluator's `num_correct` and `num_tokens`.
`answer_summary` says what a model answers when it is wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from partf.errors import DataError, UsageError
from partf.training.evaluation.perplexity import (
    evaluation_call,
    exact_targets,
    predicted_tokens,
)

#: Bucket edges in tokens: [0, 16), [16, 32), ..., [512, 1024), then [1024, inf).
DEFAULT_EDGES = (0, 16, 32, 64, 128, 256, 512, 1024)


@dataclasses.dataclass(frozen=True)
class DistanceBucket:
    """The `answers` whose key-to-query distance in tokens is in [low, high) (`high` None:
    no end, the last bucket), and how many of them the model predicts exactly (`correct`)."""

    low: int
    high: int | None
    answers: int
    correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.answers if self.answers else 0.0

    @property
    def label(self) -> str:
        """ "16-32" for [16, 32), "1024+" for the open last bucket."""
        return f"{self.low}+" if self.high is None else f"{self.low}-{self.high}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "distance": self.label,
            "from": self.low,
            "to": self.high,
            "answers": self.answers,
            "correct": self.correct,
            "accuracy": self.accuracy,
        }


def answer_distances(inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """int64 [..., L]: the distance of every answer (target not 0, input the key asked)
    from its key's one earlier occurrence, in its pair (at least 1), 0 elsewhere; `inputs`
    and `targets` int [..., L], e.g. [batches, B, L] as `read_mqar` returns them.

    Raises:
        UsageError: `inputs` and `targets` differ in shape.
        DataError: the targets hold no answer, or an answer's key does not occur exactly
            once before it in its row (the arrays are not an MQAR split).
    """
    inputs, targets = np.asarray(inputs), np.asarray(targets)
    if inputs.shape != targets.shape or inputs.ndim < 1:
        raise UsageError(
            f"inputs {inputs.shape} and targets {targets.shape} must have the same shape "
            "[..., L]; pass an MQAR split's arrays as partf.tasks.mqar.read_mqar returns them"
        )
    length = inputs.shape[-1]
    rows_x, rows_y = inputs.reshape(-1, length), targets.reshape(-1, length)
    distances = np.zeros(rows_x.shape, np.int64)
    rows, positions = np.nonzero(rows_y)  # every answer, row by row
    if not len(rows):
        raise DataError(
            "the targets hold no answers (all 0); pass an MQAR split (partf-build-data --task=mqar)"
        )
    # [answers, L], a few thousand rows at a time: where each answer's key occurs before it.
    for start in range(0, len(rows), 4096):
        row, at = rows[start : start + 4096], positions[start : start + 4096]
        keys = rows_x[row, at]
        earlier = (rows_x[row] == keys[:, None]) & (np.arange(length)[None, :] < at[:, None])
        found = earlier.sum(axis=1)
        if (found != 1).any():
            i = int(np.flatnonzero(found != 1)[0])
            index = (*np.unravel_index(row[i], inputs.shape[:-1]), at[i])
            raise DataError(
                f"the answer at index {tuple(int(n) for n in index)} asks key {keys[i]}, "
                f"which occurs {found[i]} times before it in its row (an MQAR answer's key "
                "occurs once, in its pair); pass an MQAR split (partf-build-data --task=mqar)"
            )
        distances[row, at] = at - np.argmax(earlier, axis=1)
    return distances.reshape(inputs.shape)


def bucket_counts(
    distances: np.ndarray, correct: np.ndarray, edges: Sequence[int] = DEFAULT_EDGES
) -> list[DistanceBucket]:
    """The buckets that hold answers, nearest first, counting the `distances` of
    `answer_distances` and the answers predicted exactly (bool `correct`, same shape).
    `edges`: increasing distances in tokens; bucket i is [edges[i], edges[i + 1]), a last
    one [edges[-1], inf) and, if edges[0] > 0, a first one [0, edges[0]), so that every
    answer is in one.
    """
    bounds = [int(e) for e in edges]
    if not bounds or bounds[0] < 0 or (np.diff(bounds) <= 0).any():
        raise UsageError(f"distance edges must be increasing and >= 0, got {list(edges)}")
    if bounds[0] > 0:
        bounds.insert(0, 0)
    distances, correct = np.asarray(distances), np.asarray(correct, bool)
    answers = distances > 0
    which = np.searchsorted(bounds, distances[answers], side="right") - 1
    totals = np.bincount(which, minlength=len(bounds))
    hits = np.bincount(which, weights=correct[answers], minlength=len(bounds))
    highs: list[int | None] = [*bounds[1:], None]
    return [
        DistanceBucket(bounds[i], highs[i], int(totals[i]), int(round(hits[i])))
        for i in range(len(bounds))
        if totals[i]
    ]


def split_predictions(
    model: Any,
    inputs: np.ndarray,
    targets: np.ndarray,
    mode: str | None = None,
    jit_compile: bool = True,
) -> np.ndarray:
    """int [batches, B, L]: the model's most likely token at every position
    (`predicted_tokens`, of the targets' dtype), in stream order with the evaluation
    memory starting empty. `mode`: a search's block weights (None: its own; "sample"
    draws other Gumbel samples than an evaluator's pass). `jit_compile` applies on
    TensorFlow; other backends run the batches eagerly.
    """
    dtype = str(np.asarray(targets).dtype)

    def batch(x: Any) -> Any:
        return predicted_tokens(model, evaluation_call(model, x, mode), dtype)

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        batch = tf.function(batch, jit_compile=jit_compile, reduce_retracing=True)
    model.reset_state("eval")
    predicted = [keras.ops.convert_to_numpy(batch(x)) for x in inputs]
    model.reset_state("eval")
    return np.stack(predicted)


def exact_answers(predictions: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """bool [...]: the answers (targets not 0) predicted exactly, by the evaluator's own
    test (`exact_targets`) on `split_predictions`."""
    return keras.ops.convert_to_numpy(exact_targets(predictions, targets)).astype(bool)


def answer_summary(predictions: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
    """What a model answers, right or wrong: how many distinct tokens, and how often a
    value of the row's own pairs (every pair is asked once, so those are the row's
    answers): a model that knows a row's values but not their keys gives those (by chance
    2n/V of them for n pairs from V/2 values); one that knows neither, any value, or one.

    Returns {"answers", "distinct_predictions", "in_row"}: the answers, the distinct
    tokens predicted at them (`split_predictions`), and the share of answers whose
    prediction is one of the row's answers.
    """
    predictions, targets = np.asarray(predictions), np.asarray(targets)
    if predictions.shape != targets.shape:
        raise UsageError(
            f"predictions {predictions.shape} and targets {targets.shape} must have the "
            "same shape; pass split_predictions' output for the same split"
        )
    length = targets.shape[-1]
    rows_p, rows_y = predictions.reshape(-1, length), targets.reshape(-1, length)
    row, at = np.nonzero(rows_y)  # every answer
    given = rows_p[row, at]  # token ids, >= 0
    # holds[r, v]: value v is one of row r's answers (ids are small: a task's vocabulary).
    holds = np.zeros((len(rows_y), int(max(rows_y.max(), given.max(initial=0))) + 1), bool)
    holds[row, rows_y[row, at]] = True
    answers = len(row)
    return {
        "answers": answers,
        "distinct_predictions": int(np.unique(given).size),
        "in_row": int(holds[row, given].sum()) / answers if answers else 0.0,
    }


def accuracy_by_distance(
    model: Any,
    inputs: np.ndarray,
    targets: np.ndarray,
    edges: Sequence[int] = DEFAULT_EDGES,
    mode: str | None = None,
    jit_compile: bool = True,
) -> list[DistanceBucket]:
    """MQAR accuracy per bucket of key-to-query distance (`bucket_counts`), of an MQAR
    split's int [batches, B, L] arrays as `partf.tasks.mqar.read_mqar` returns them;
    `mode` and `jit_compile` as `split_predictions`.

    Raises:
        DataError: the arrays are not an MQAR split (`answer_distances`).
    """
    distances = answer_distances(inputs, targets)  # refuses other data before the pass
    predictions = split_predictions(model, inputs, targets, mode, jit_compile)
    return bucket_counts(distances, exact_answers(predictions, targets), edges)
