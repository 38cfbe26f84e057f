"""The MQAR generator: answers are the paired values, draws are deterministic and
separate per split, and bad settings or altered files are refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from partf.data.mqar import (
    MQAR_FILE,
    MQARSettings,
    draw_examples,
    draw_split,
    is_mqar,
    parse_pairs,
    read_mqar,
    write_mqar,
)
from partf.errors import DataError, UsageError

SMALL = MQARSettings(
    seq_len=64, pairs=(2, 4, 8), vocab_size=64, batch_size=8, train_examples=256,
    eval_examples=64,
)  # fmt: skip


def test_every_answer_is_the_value_its_key_was_paired_with():
    rng = np.random.default_rng(3)
    inputs, targets = draw_examples(500, 64, 8, 64, rng)
    for x, y in zip(inputs, targets, strict=True):
        pairs = dict(zip(x[0:16:2].tolist(), x[1:16:2].tolist(), strict=True))
        assert len(pairs) == 8  # distinct keys
        queries = np.flatnonzero(y)
        assert len(queries) == 8  # every key asked once
        for q in queries:
            assert q >= 16 and q % 2 == 0
            assert y[q] == pairs[int(x[q])]
        assert set(x[queries].tolist()) == set(pairs)


def test_a_key_appears_once_before_its_query_and_nowhere_else():
    rng = np.random.default_rng(4)
    inputs, targets = draw_examples(300, 128, 16, 128, rng)
    for x, y in zip(inputs, targets, strict=True):
        for q in np.flatnonzero(y):
            where = np.flatnonzero(x == x[q])
            assert len(where) == 2 and where[1] == q and where[0] < 32
        keys, values = x[0:32:2], x[1:32:2]
        assert keys.max() < 64 <= values.min()  # keys below V/2, values above
        assert (x[32:] < 64).all()  # after the pairs: queries and noise, all keys


def test_query_slots_favour_early_positions():
    # Zoology's power law: most queries close to the pairs, some far away.
    rng = np.random.default_rng(5)
    _, targets = draw_examples(2000, 256, 4, 64, rng)
    positions = np.nonzero(targets)[1]
    assert np.mean(positions < 128) > 0.6
    assert positions.max() > 200


def test_same_seed_same_bytes_and_splits_differ():
    a = draw_split(SMALL, "train")
    b = draw_split(SMALL, "train")
    assert a[0].tobytes() == b[0].tobytes() and a[1].tobytes() == b[1].tobytes()
    test = draw_split(SMALL, "test")
    assert not np.array_equal(a[0][: test[0].shape[0]], test[0])
    other = draw_split(MQARSettings(**{**SMALL.to_dict(), "pairs": (2, 4, 8), "seed": 1}), "train")
    assert not np.array_equal(a[0], other[0])


def test_train_cycles_through_pair_counts_and_eval_uses_the_largest():
    inputs, targets = draw_split(SMALL, "train")
    answers = np.count_nonzero(targets.reshape(-1, SMALL.seq_len), axis=1)
    assert answers[:6].tolist() == [2, 4, 8, 2, 4, 8]
    _, test = draw_split(SMALL, "test")
    assert set(np.count_nonzero(test.reshape(-1, SMALL.seq_len), axis=1).tolist()) == {8}
    assert inputs.shape == (256 // 8, 8, 64)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"vocab_size": 63}, "vocab_size must be even"),
        ({"pairs": (20,)}, "needs seq_len >= 80"),
        ({"pairs": (0,)}, "pairs must be positive"),
        ({"vocab_size": 16, "pairs": (8,)}, "raise vocab_size"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"eval_examples": 4}, "at least one batch"),
    ],
)
def test_bad_settings_are_refused_in_one_line(change, words):
    values = {**SMALL.to_dict(), **change}
    values["pairs"] = tuple(values["pairs"])
    with pytest.raises(UsageError, match=words) as caught:
        MQARSettings(**values)
    assert "\n" not in str(caught.value)


def test_parse_pairs():
    assert parse_pairs("4, 8,16") == (4, 8, 16)
    with pytest.raises(UsageError, match="whole numbers"):
        parse_pairs("4,x")


def test_written_splits_read_back_identically(tmp_path):
    folders = write_mqar(tmp_path / "mq", SMALL)
    assert all(is_mqar(f) for f in folders.values())
    settings, split, inputs, targets = read_mqar(folders["valid"])
    want = draw_split(SMALL, "valid")
    assert settings == SMALL and split == "valid"
    assert np.array_equal(inputs, want[0]) and np.array_equal(targets, want[1])
    with pytest.raises(UsageError, match="not empty"):
        write_mqar(tmp_path / "mq", SMALL)
    write_mqar(tmp_path / "mq", SMALL, overwrite=True)


def test_altered_or_broken_files_are_refused_naming_the_file(tmp_path):
    folder = write_mqar(tmp_path / "mq", SMALL)["train"]
    path = folder / MQAR_FILE
    record = json.loads(path.read_text())
    record["sha256"] = "0" * 64
    path.write_text(json.dumps(record))
    with pytest.raises(DataError, match="other data than when it was written") as caught:
        read_mqar(folder)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    path.write_text("{not json")
    with pytest.raises(DataError, match="not a valid MQAR split"):
        read_mqar(folder)
    record["format_version"] = 99
    path.write_text(json.dumps(record))
    with pytest.raises(DataError, match="format version 99"):
        read_mqar(folder)


@pytest.mark.slow  # two 500-step trainings: about a minute
def test_softmax_attention_learns_recall_and_linear_attention_of_its_size_does_not(tmp_path):
    """The task needs attention: at 64 tokens and 8 pairs, an all-softmax model of width
    64 answers (nearly) every query after 500 steps, an all-linear one (TransNormer's
    norm attention) of the same size stays near guessing (1 in 64 values)."""
    from partf.training.config import TrainConfig
    from partf.training.trainer import train

    settings = MQARSettings(
        seq_len=64, pairs=(4, 8), eval_pairs=8, vocab_size=128, batch_size=32,
        train_examples=500 * 32, eval_examples=256,
    )  # fmt: skip
    folders = write_mqar(tmp_path / "mq", settings)
    accuracy = {}
    for name, architecture in (("softmax", "A D A D"), ("linear", "norm D norm D")):
        config = TrainConfig(
            train_directory=str(folders["train"]),
            valid_directory=str(folders["valid"]),
            test_directory="",
            sp_model_prefix="",
            model_name=name,
            output_dir=str(tmp_path / name),
            max_lr=1e-3,
            warmup_steps=50,
            lr_schedule="constant",
            opt_name="adam",
            max_steps=500,
            steps_per_execution=50,
            log_every=100,
            eval_every=1000,
            jit_compile=False,
            model=dict(
                vocab_size=None, batch_size=None, tau_steps=None, d_model=64, num_heads=2,
                d_ffn=128, num_layers=4, architecture=architecture, mem_len=0,
                dropout_rate=0.0, cutoffs=(),
            ),
        )  # fmt: skip
        accuracy[name] = train(config)["valid"]["accuracy"]
    assert accuracy["softmax"] >= 0.9, accuracy
    assert accuracy["linear"] <= 0.2, accuracy
