"""The MQAR generator: answers are the paired values, draws are deterministic and
separate per split, and bad settings or altered files are refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from partf.errors import DataError, UsageError
from partf.tasks.mqar import (
    TASK,
    MQARSettings,
    draw_examples,
    draw_split,
    is_mqar,
    read_mqar,
    write_mqar,
)

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
    other = draw_split(
        MQARSettings(**{**TASK.to_dict(SMALL), "pairs": (2, 4, 8), "seed": 1}), "train"
    )
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
    values = {**TASK.to_dict(SMALL), **change}
    values["pairs"] = tuple(values["pairs"])
    with pytest.raises(UsageError, match=words) as caught:
        MQARSettings(**values)
    assert "\n" not in str(caught.value)


def test_the_build_flags_give_the_settings_and_the_draws_stay_those_of_earlier_splits(tmp_path):
    """partf-build-data's --mqar_<setting> flags (the shared --seq_len, --batch_size and
    --vocab_size) make the settings, and their mqar.json is byte for byte the one partf
    wrote before tasks had a package (sha256 of 21671d2's draws): studies' run records
    depend on the same examples."""
    from partf.cli.build_data import build_parser, options_of

    argv = ["--task=mqar", "--seq_len=64", "--batch_size=8", "--vocab_size=64",
            "--mqar_pairs=2,4,8", "--mqar_train_examples=256",
            "--mqar_eval_examples=64"]  # fmt: skip
    assert TASK.settings_of(options_of(TASK, build_parser().parse_args(argv))) == SMALL
    folders = write_mqar(tmp_path / "mq", SMALL)
    digests = {
        split: json.loads((f / "mqar.json").read_text())["sha256"] for split, f in folders.items()
    }
    assert digests == {
        "train": "8f0da39e0d48970ebffbb3f5708e095e451a267480ebe12f48a46088c66bc686",
        "valid": "cbbbb62ccc18912c370d2f5bc4d2eeab5ab8ab19bcaf7f5598fb65b0b040caf7",
        "test": "27479fd7b1b7050929df1b6695ae74f91809959bee408036b5ecfc3b46671a68",
    }
    record = json.loads((folders["train"] / "mqar.json").read_text())
    assert record["settings"]["eval_pairs"] is None and record["answers"] == 1192


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


def test_a_split_written_before_the_one_format_key_still_reads(tmp_path):
    """mqar.json of the layout before partf's one format key ("format": "partf-mqar",
    "format_version": 1): the same version, read as it is (the studies' splits)."""
    folder = write_mqar(tmp_path / "mq", SMALL)["valid"]
    path = folder / TASK.marker
    record = json.loads(path.read_text())
    assert record["format"] == 1 and record.pop("task") == "mqar"
    path.write_text(json.dumps({**record, "format": "partf-mqar", "format_version": 1}))
    settings, split, inputs, _ = read_mqar(folder)
    assert settings == SMALL and split == "valid"
    assert np.array_equal(inputs, draw_split(SMALL, "valid")[0])


def test_altered_or_broken_files_are_refused_naming_the_file(tmp_path):
    folder = write_mqar(tmp_path / "mq", SMALL)["train"]
    path = folder / TASK.marker
    record = json.loads(path.read_text())
    record["sha256"] = "0" * 64
    path.write_text(json.dumps(record))
    with pytest.raises(DataError, match="other data than when it was written") as caught:
        read_mqar(folder)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    path.write_text("{not json")
    with pytest.raises(DataError, match="not a valid mqar split"):
        read_mqar(folder)
    record["format"] = 99
    path.write_text(json.dumps(record))
    with pytest.raises(DataError, match=r"newer partf \(task split format 99;"):
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
