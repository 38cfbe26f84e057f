"""MQAR batches mixed into a text stream (`partf.training.mixing`, made into a split by
`partf.training.splits.mixed_split`): the mixed stream is the order written out by hand,
on numpy batches and on tf.data, of the length the run is planned with; and a run trains
on it, resumes into it as an uninterrupted run does, and scores the recall split into
results.json. (Reading and checking the MQAR splits: tests/training/test_splits.py.)"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from partf.tasks.mqar import MQARSettings, write_mqar
from partf.training.mixing import MQAR, TEXT, mix_choices
from partf.training.splits import ArrayBatches, Split, mixed_split

VOCAB, ROWS, LENGTH = 50, 2, 4


def test_one_mqar_batch_follows_every_k_text_batches():
    assert mix_choices(3, 1).tolist() == [TEXT, MQAR] * 3
    assert mix_choices(5, 2).tolist() == [TEXT, TEXT, MQAR, TEXT, TEXT, MQAR, TEXT]
    assert mix_choices(2, 3).tolist() == [TEXT, TEXT]  # fewer text batches than k
    with pytest.raises(ValueError):
        mix_choices(3, 0)


def direct_stream(text, mqar, every):
    """The mixed stream written out: after every `every`-th text batch, the next MQAR
    batch, cycling over the split."""
    stream, used = [], 0
    for i, batch in enumerate(text):
        stream.append(batch)
        if (i + 1) % every == 0:
            stream.append(mqar[used % len(mqar)])
            used += 1
    return stream


def arrays(count, seed, low):
    rng = np.random.default_rng(seed)
    inputs = rng.integers(low, low + 10, size=(count, ROWS, LENGTH)).astype(np.int32)
    return inputs, inputs + 100  # targets told apart from inputs


@pytest.mark.parametrize("every", [1, 2, 3])
def test_the_mixed_numpy_stream_is_the_stream_written_out(every):
    text, mqar = arrays(7, 0, 1), arrays(2, 1, 500)  # two MQAR batches: they cycle
    split = Split(ArrayBatches(*text), 7, ROWS, LENGTH, VOCAB, {})
    mixed = mixed_split(split, Split(ArrayBatches(*mqar), 2, ROWS, LENGTH, 8, {}), every)
    want = direct_stream(list(zip(*text, strict=True)), list(zip(*mqar, strict=True)), every)
    assert mixed.num_batches == len(mixed.dataset) == 7 + 7 // every == len(want)
    for (x, y), (wx, wy) in zip(mixed.dataset, want, strict=True):
        np.testing.assert_array_equal(x, wx)
        np.testing.assert_array_equal(y, wy)
    # What fit reads of a resumed epoch: the rows of the batches after those consumed.
    x, y = mixed.dataset.rows(3, len(want))
    np.testing.assert_array_equal(x, np.concatenate([b[0] for b in want[3:]]))
    np.testing.assert_array_equal(y, np.concatenate([b[1] for b in want[3:]]))


@pytest.mark.parametrize("every", [1, 2])
def test_the_mixed_tf_data_stream_is_the_stream_written_out(every):
    text, mqar = arrays(5, 2, 1), arrays(3, 3, 500)
    slices = tf.data.Dataset.from_tensor_slices
    split = Split(slices(text), 5, ROWS, LENGTH, VOCAB, {})
    mixed = mixed_split(split, Split(slices(mqar), 3, ROWS, LENGTH, 8, {}), every)
    want = direct_stream(list(zip(*text, strict=True)), list(zip(*mqar, strict=True)), every)
    assert int(mixed.dataset.cardinality()) == mixed.num_batches == len(want)
    got = list(mixed.dataset.as_numpy_iterator())
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want, strict=True):
        np.testing.assert_array_equal(x, wx)
        np.testing.assert_array_equal(y, wy)
    # fitting.run_fit's view of a resumed epoch: skip the consumed batches, take the rest.
    rest = list(mixed.dataset.cache().skip(4).take(len(want) - 4).as_numpy_iterator())
    for (x, y), (wx, wy) in zip(rest, want[4:], strict=True):
        np.testing.assert_array_equal(x, wx)
        np.testing.assert_array_equal(y, wy)


# ------------------------------------------------------------------ a whole run
@pytest.fixture(scope="module")
def mixed_runs(trainer_records, tmp_path_factory):
    """Runs of 2 epochs of 6 text batches with an MQAR batch after every second (9 steps
    an epoch, no XLA): one uninterrupted, one stopped by SIGINT at step 4 and resumed."""
    from tests.training.helpers import interrupted_and_whole

    settings = MQARSettings(
        seq_len=16, pairs=(2,), vocab_size=32, batch_size=8, train_examples=16, eval_examples=16
    )
    splits = write_mqar(tmp_path_factory.mktemp("mqar") / "mqar", settings)
    run = interrupted_and_whole(
        trainer_records,
        tmp_path_factory,
        train_directory=str(trainer_records[0] / "train6"),
        valid_directory="",
        mix_directory=str(splits["train"]),
        mix_every=2,
        recall_directory=str(splits["test"]),
        jit_compile=False,
        steps_per_execution=2,
        ckpt_every=0,
        eval_every=0,
        log_every=3,
    )
    steps = [step for step, _ in run.checkpoints]
    return run.whole, run.whole_results, steps, run.resumed_results


def test_a_mixed_run_trains_the_mixed_stream_and_scores_recall(mixed_runs):
    from tests.training.helpers import tensorboard_scalars

    whole, results, _, _ = mixed_runs
    assert results["data"]["batches_per_epoch"] == 9 and results["steps"] == 18
    recall = results["recall"]
    assert recall["num_tokens"] == 2 * 8 * 2  # two answers a row, 8 rows, 2 batches
    assert recall["num_batches"] == 2 and 0.0 <= recall["accuracy"] <= 1.0
    assert recall["perplexity"] == pytest.approx(math.exp(recall["loss"]))
    assert results["test"]["accuracy"] is None  # the text is scored by perplexity alone
    assert results["eval_ms_per_batch"]["recall"] > 0
    assert results["config"]["training"]["mix_every"] == 2
    valid = tensorboard_scalars(Path(whole.output_dir) / "logs" / "tiny" / "valid")
    assert valid["recall_accuracy"] == [(18, pytest.approx(recall["accuracy"], rel=1e-6))]
    assert valid["recall_loss"] == [(18, pytest.approx(recall["loss"], rel=1e-6))]


def test_a_mixed_run_resumed_mid_epoch_ends_like_the_uninterrupted_one(mixed_runs):
    _, whole, steps, resumed = mixed_runs
    assert steps == [4]  # mid-epoch: 4 of the epoch's 9 mixed batches consumed
    assert resumed["steps"] == whole["steps"] == 18
    for key in (("train", "loss"), ("test", "loss"), ("recall", "loss"), ("recall", "accuracy")):
        assert resumed[key[0]][key[1]] == pytest.approx(whole[key[0]][key[1]], rel=1e-6), key
