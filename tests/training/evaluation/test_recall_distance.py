"""MQAR accuracy by key-to-query distance: the distances against a direct loop and a
hand-made row, the buckets, and predictions that are the evaluator's own (the buckets
add up to its `num_correct` and `num_tokens`)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from partf.errors import DataError, UsageError
from partf.tasks.mqar import MQARSettings, draw_split
from partf.training.evaluation.perplexity import Evaluator
from partf.training.evaluation.recall_distance import (
    DEFAULT_EDGES,
    DistanceBucket,
    accuracy_by_distance,
    answer_distances,
    answer_summary,
    bucket_counts,
)
from tests.training.evaluation.helpers import MQAR, trained_mqar_model


def looped_distances(inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The distances row by row in plain Python: each answer's position minus that of the
    one earlier occurrence of its key."""
    want = np.zeros(inputs.shape, np.int64)
    for index in np.ndindex(inputs.shape[:-1]):
        row, answers = inputs[index].tolist(), targets[index].tolist()
        for p, answer in enumerate(answers):
            if answer:
                earlier = [j for j in range(p) if row[j] == row[p]]
                assert len(earlier) == 1
                want[(*index, p)] = p - earlier[0]
    return want


def test_every_answers_distance_is_the_direct_loops():
    # The training split cycles through 2, 8 and 16 pairs: rows of every kind.
    settings = MQARSettings(
        seq_len=128, pairs=(2, 8, 16), vocab_size=64, batch_size=8, train_examples=96,
        eval_examples=8,
    )  # fmt: skip
    inputs, targets = draw_split(settings, "train")  # [12, 8, 128]
    distances = answer_distances(inputs, targets)
    assert distances.shape == inputs.shape
    np.testing.assert_array_equal(distances, looped_distances(inputs, targets))
    assert ((distances > 0) == (targets != 0)).all()
    # Every distance is positive, and some queries are far from their pairs.
    assert distances[targets != 0].min() >= 1 and distances.max() > 64


def test_a_hand_made_row_gives_its_known_distances():
    #   position: 0  1  2  3   4  5  6  7  8  9 10 11
    row = [3, 9, 5, 12, 4, 7, 5, 4, 7, 6, 3, 4]  # pairs (3, 9), (5, 12); noise 4, 7, 6
    answers = [0] * 12
    answers[6], answers[10] = 12, 9  # key 5 asked at 6 (its pair at 2), key 3 at 10 (at 0)
    inputs, targets = np.array([[row]]), np.array([[answers]])  # [batches 1, B 1, L 12]
    want = np.zeros((1, 1, 12), np.int64)
    want[0, 0, 6], want[0, 0, 10] = 4, 10
    np.testing.assert_array_equal(answer_distances(inputs, targets), want)
    # One bucket each, right at the nearer answer only.
    correct = np.zeros((1, 1, 12), bool)
    correct[0, 0, 6] = True
    assert bucket_counts(want, correct, (0, 8, 16)) == [
        DistanceBucket(0, 8, answers=1, correct=1),
        DistanceBucket(8, 16, answers=1, correct=0),
    ]


def test_buckets_hold_every_answer_and_only_buckets_with_answers_are_kept():
    distances = np.array([0, 1, 15, 16, 300, 1023, 1024, 5000, 0])
    correct = np.array([True, True, False, True, True, False, True, False, True])
    buckets = bucket_counts(distances, correct)
    assert [b.label for b in buckets] == ["0-16", "16-32", "256-512", "512-1024", "1024+"]
    assert [(b.answers, b.correct) for b in buckets] == [(2, 1), (1, 1), (1, 1), (1, 0), (2, 1)]
    assert buckets[0].accuracy == 0.5 and buckets[-1].to_dict() == {
        "distance": "1024+", "from": 1024, "to": None, "answers": 2, "correct": 1,
        "accuracy": 0.5,
    }  # fmt: skip
    # Edges that start above 0 get a first bucket from 0.
    assert [b.label for b in bucket_counts(distances, correct, (16, 512))] == [
        "0-16", "16-512", "512+",
    ]  # fmt: skip
    assert DEFAULT_EDGES == (0, 16, 32, 64, 128, 256, 512, 1024)
    with pytest.raises(UsageError, match="increasing"):
        bucket_counts(distances, correct, (0, 32, 16))


def test_arrays_that_are_not_an_mqar_split_are_refused_in_one_line():
    inputs, targets = draw_split(MQARSettings(**MQAR), "valid")
    # Text: every target is the next token, so keys are not asked once after one pair.
    text = np.random.default_rng(0).integers(1, 16, size=(2, 4, 65))
    with pytest.raises(DataError) as raised:
        answer_distances(text[..., :-1], text[..., 1:])
    assert "\n" not in str(raised.value)
    assert "times before it in its row" in str(raised.value)
    assert "pass an MQAR split (partf-build-data --task=mqar)" in str(raised.value)
    # A key that occurs twice before its query.
    doubled = inputs.copy()
    b, r, p = (int(n) for n in np.argwhere(targets != 0)[0])
    doubled[b, r, p - 1] = doubled[b, r, p]
    with pytest.raises(DataError, match=rf"answer at index \({b}, {r}, {p}\) .* occurs 2 times"):
        answer_distances(doubled, targets)
    with pytest.raises(DataError, match="no answers"):
        answer_distances(inputs, np.zeros_like(targets))
    with pytest.raises(UsageError, match="same shape"):
        answer_distances(inputs, targets[0])


def test_the_buckets_add_up_to_the_evaluators_count_on_the_same_split():
    """The per-position predictions are the ones the evaluator counts: summed over the
    buckets they give its num_correct and num_tokens, for a model whose XL memory carries
    from batch to batch (so the rows must also be scored in its stream order), starting
    from leftover memory."""
    model = trained_mqar_model(mem_len=8)
    inputs, targets = draw_split(MQARSettings(**MQAR), "test")  # [8, 4, 64]
    stats = Evaluator(model, jit_compile=False, accuracy=True).evaluate(
        tf.data.Dataset.from_tensor_slices((inputs, targets))
    )
    model(inputs[3], training=False)  # memory left over: the pass must start empty
    buckets = accuracy_by_distance(model, inputs, targets, jit_compile=False)
    assert [b.label for b in buckets] == ["0-16", "16-32", "32-64"]
    assert sum(b.answers for b in buckets) == stats.num_tokens == int((targets != 0).sum())
    assert sum(b.correct for b in buckets) == stats.num_correct
    # Right and wrong answers in every bucket, so equal sums are not two zeros.
    assert all(0 < b.correct < b.answers for b in buckets), buckets


def test_answer_summary_is_the_direct_count_of_values_and_of_the_rows_values():
    settings = MQARSettings(
        seq_len=64, pairs=(4, 8), vocab_size=64, batch_size=4, train_examples=32,
        eval_examples=4,
    )  # fmt: skip
    inputs, targets = draw_split(settings, "train")  # [8, 4, 64]
    # Predictions that are sometimes right, sometimes another value of the row, sometimes
    # a value the row does not hold, and noise elsewhere.
    predictions = np.random.default_rng(0).integers(32, 64, size=targets.shape)
    right = np.random.default_rng(1).random(targets.shape) < 0.3
    predictions = np.where(right, targets, predictions)
    in_row = answers = 0
    values = set()
    for index in np.ndindex(targets.shape[:-1]):
        row_values = {int(v) for v in targets[index] if v}
        for p, t in zip(predictions[index].tolist(), targets[index].tolist(), strict=True):
            if t:
                answers, in_row, values = answers + 1, in_row + (p in row_values), values | {p}
    got = answer_summary(predictions, targets)
    want = {"answers": answers, "distinct_predictions": len(values), "in_row": in_row / answers}
    assert got == want
    assert 0.3 < got["in_row"] < 1
    # By hand: a row asks for 12 and 9; the model gives 9 (the row's, wrong) and 33.
    row_targets = np.zeros((1, 1, 12), np.int64)
    row_targets[0, 0, 6], row_targets[0, 0, 10] = 12, 9
    row_predictions = np.full((1, 1, 12), 9)
    row_predictions[0, 0, 10] = 33
    assert answer_summary(row_predictions, row_targets) == {
        "answers": 2, "distinct_predictions": 2, "in_row": 0.5,
    }  # fmt: skip
    with pytest.raises(UsageError, match="must have the same shape"):
        answer_summary(row_predictions[..., :6], row_targets)
