"""A run's records (`partf.training.splits`): each split's batches and text counts, the
numpy batches the JAX backend trains on, the checks that the splits fit together, and
the MQAR splits of --mix_directory and --recall_directory read beside the text."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from partf.training.config import ConfigError, TrainConfig
from partf.training.fitting import plan_segments
from partf.training.run_state import Segment
from partf.training.splits import ArrayBatches, Split, load_data, load_split, vocab_size_of

VOCAB = 50


def stream(num_batches: int, rows: int, length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, VOCAB, num_batches * rows * length + 1)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """train (3 batches of 2 x 4, with text counts and [MASK] id 5), valid (2 batches, id 5),
    wide (batches of 4 x 4), other_mask ([MASK] id 6)."""
    from partf.data import context_batches, write_tfrecords

    root = tmp_path_factory.mktemp("split_records")
    for name, num_batches, rows, extra in (
        ("train", 3, 2, dict(num_words=30, num_lines=6, num_chars=200, mask_id=5)),
        ("valid", 2, 2, dict(mask_id=5)),
        ("wide", 2, 4, {}),
        ("other_mask", 2, 2, dict(mask_id=6)),
    ):
        tokens = stream(num_batches, rows, 4, seed=num_batches * rows).astype("int32")
        batches = context_batches(tokens, rows, 4)
        write_tfrecords(batches, root / name, vocab_size=VOCAB, num_tokens=len(tokens), **extra)
    return root


def config(root, **changes) -> TrainConfig:
    values = dict(
        train_directory=str(root / "train"),
        valid_directory="",
        test_directory="",
        sp_model_prefix="",
        epochs=2,
        warmup_steps=1,
    )
    return TrainConfig(**{**values, **changes})


def test_a_split_holds_its_batches_shape_and_text_counts(records):
    from partf.data import context_batches

    split = load_split(str(records / "train"), "train")
    assert (split.num_batches, split.batch_size, split.seq_len) == (3, 2, 4)
    assert (split.vocab_size, split.mask_id, split.task) == (VOCAB, 5, "text")
    # Words count each line's end; every (t, t + 1) pair of the stream is a token.
    assert split.text_counts == {"num_words": 36, "num_chars": 200, "text_tokens": 3 * 2 * 4}
    want = context_batches(stream(3, 2, 4, seed=6).astype("int32"), 2, 4)
    got = [(np.asarray(x), np.asarray(y)) for x, y in split.dataset]
    assert len(got) == 3 and int(split.dataset.cardinality()) == 3
    for (x, y), batch in zip(got, want, strict=True):
        np.testing.assert_array_equal(x, batch[:, :-1])
        np.testing.assert_array_equal(y, batch[:, 1:])


def test_array_batches_give_fit_the_rows_it_cuts_back_into_the_same_batches():
    batches = np.arange(4 * 2 * 6, dtype=np.int32).reshape(4, 2, 6)  # [n, B, L + 1]
    array = ArrayBatches(batches)
    assert len(array) == 4
    x, y = array.rows(1, 3)
    np.testing.assert_array_equal(x, batches[1:3, :, :-1].reshape(4, 5))
    np.testing.assert_array_equal(y, batches[1:3, :, 1:].reshape(4, 5))
    pairs = list(array)
    np.testing.assert_array_equal(pairs[2][1], batches[2, :, 1:])
    # A task's own targets: the inputs are taken as they are.
    answers = ArrayBatches(batches[..., :5], targets=-batches[..., :5])
    np.testing.assert_array_equal(answers.rows(0, 1)[1], -batches[0, :, :5])


def test_the_run_length_follows_the_epochs_capped_by_max_steps(records, caplog):
    data = load_data(config(records, valid_directory=str(records / "valid")))
    assert (data.total_steps, data.batches_per_epoch, data.tokens_per_batch) == (6, 3, 8)
    assert data.vocab_size == VOCAB and data.valid.num_batches == 2 and data.test is None
    with caplog.at_level(logging.WARNING, logger="partf.training"):
        capped = load_data(config(records, max_steps=4, warmup_steps=4))
    assert capped.total_steps == 4
    assert "the warm-up (4 steps) is not shorter than the run (4 steps)" in caplog.text


def test_splits_of_another_batch_shape_or_mask_id_are_refused(records):
    with pytest.raises(ConfigError, match=r"^valid records have batches of 4x4 but the training"):
        load_data(config(records, valid_directory=str(records / "wide")))
    with pytest.raises(ConfigError, match=r"the test records' \[MASK\] id is 6 but the train"):
        load_data(config(records, test_directory=str(records / "other_mask"), objective="mlm"))
    masked = load_data(config(records, valid_directory=str(records / "valid"), objective="mlm"))
    assert masked.masking is not None and masked.valid.text_counts == {}


def test_without_metadata_the_vocabulary_comes_from_the_tokenizer(tmp_path):
    unknown = Split(None, 1, 2, 4, None, {})
    assert vocab_size_of([unknown, Split(None, 1, 2, 4, 77, {})], "") == 77
    with pytest.raises(ConfigError, match="cannot tell the vocabulary size: .* pass --sp_model"):
        vocab_size_of([unknown], str(tmp_path / "missing"))


# ------------------------------------------------------------------ recall tasks
@pytest.fixture(scope="module")
def mqar_folders(tmp_path_factory):
    """MQAR splits that fit the `train` records (`fit_train`: 2 batches of 2 x 4,
    `fit_test`: 1), and that do not (`wide_*`: 4 rows a batch; `large_*`: vocabulary 64,
    above the records' 50). The `train` records themselves are no MQAR split."""
    from partf.tasks.mqar import MQARSettings, write_mqar

    root = tmp_path_factory.mktemp("mqar")
    small = dict(seq_len=4, pairs=(1,), vocab_size=8, train_examples=4, eval_examples=2)
    write_mqar(root / "fit", MQARSettings(batch_size=2, **small))
    write_mqar(root / "wide", MQARSettings(batch_size=4, **{**small, "eval_examples": 4}))
    write_mqar(root / "large", MQARSettings(batch_size=2, **{**small, "vocab_size": 64}))
    return root


def test_a_mixed_run_counts_the_mqar_batches_in_its_epochs(records, mqar_folders):
    from partf.tasks.mqar import read_mqar

    data = load_data(config(records, mix_directory=str(mqar_folders / "fit_train"), mix_every=1))
    assert data.batches_per_epoch == 6 and data.total_steps == 12
    assert not data.scored and data.vocab_size == VOCAB and data.recall is None
    got = list(data.train.dataset.as_numpy_iterator())
    _, _, mqar_inputs, mqar_targets = read_mqar(mqar_folders / "fit_train")
    for position, index in ((1, 0), (3, 1), (5, 0)):  # after each text batch, cycling
        np.testing.assert_array_equal(got[position][0], mqar_inputs[index])
        np.testing.assert_array_equal(got[position][1], mqar_targets[index])
    # A run resumed at step 8 finishes epoch 1 from its third batch, in the mixed stream.
    assert plan_segments(8, data.batches_per_epoch, data.total_steps) == [Segment(1, 2, 2, 6)]
    recall = load_data(config(records, recall_directory=str(mqar_folders / "fit_test")))
    assert recall.batches_per_epoch == 3 and recall.recall.task == "mqar" and recall.recall.scored
    assert recall.recall.num_batches == 1


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"mix_directory": "wide_train"},
            r"^--mix_directory .*wide_train has batches of 4x4 but the training records 2x4; "
            r"build the \[mqar\] split with the text's --batch_size=2 and --seq_len=4\.$",
        ),
        (
            {"recall_directory": "wide_test"},
            r"^--recall_directory .*wide_test has batches of 4x4 but the training records 2x4",
        ),
        (
            {"mix_directory": "large_train"},
            r"^--mix_directory .*large_train has a mqar vocabulary of 64 tokens but the "
            r"text's has 50; build the \[mqar\] split with --vocab_size <= 50",
        ),
        (
            {"recall_directory": "train"},
            r"^--recall_directory .*train is not a task's split .*mqar\.json.*partf-build-data "
            r"--task=<task> --batch_size=2 --seq_len=4\.$",
        ),
    ],
)
def test_an_mqar_split_that_does_not_fit_the_text_is_one_line(
    records, mqar_folders, changes, message
):
    folder = {"train": records / "train"}  # text records, no MQAR split
    changes = {key: str(folder.get(value, mqar_folders / value)) for key, value in changes.items()}
    with pytest.raises(ConfigError, match=message):
        load_data(config(records, **changes))


def test_mixing_into_mqar_or_masked_training_is_refused(records, mqar_folders):
    with pytest.raises(ConfigError, match="the training records are mqar data"):
        load_data(
            config(
                records,
                train_directory=str(mqar_folders / "fit_train"),
                mix_directory=str(mqar_folders / "fit_train"),
            )
        )
    with pytest.raises(ConfigError, match="use --objective=causal"):
        config(records, recall_directory=str(mqar_folders / "fit_test"), objective="mlm")
    with pytest.raises(ConfigError, match="--mix_every must be >= 1"):
        config(records, mix_every=0)
