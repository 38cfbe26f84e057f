"""A drawn task's settings from a plan table or flags, its partf-build-data arguments, and
its split files, each task's own."""

from __future__ import annotations

import json

import pytest

from partf.errors import DataError, UsageError
from partf.tasks import copy, mqar


def test_settings_are_checked_for_their_type_then_their_sense():
    settings = mqar.TASK.settings_of({"seq_len": 64, "batch_size": 4, "pairs": [2, 4]})
    assert settings.pairs == (2, 4) and settings.eval_pairs is None
    assert mqar.TASK.settings_of({"pairs": 4}).pairs == (4,)
    for values, words in (
        ({"seq_len": "long"}, "seq_len must be an integer, not 'long'"),
        ({"seq_len": True}, "seq_len must be an integer"),
        ({"pairs": [4, "x"]}, "pairs must be an integer or a list of them"),
        ({"pairs": []}, "pairs must be an integer or a list of them"),
        ({"power_a": "a"}, "power_a must be a number"),
        ({"seq_len": 8, "pairs": 4}, "needs seq_len >= 16"),  # the dataclass's own check
    ):
        with pytest.raises(UsageError, match=words):
            mqar.TASK.settings_of(values)


def test_a_plan_table_becomes_the_build_arguments():
    argv = mqar.TASK.build_argv({"seq_len": 64, "pairs": [4, 8], "seed": 5})
    assert argv == ["--task=mqar", "--seq_len=64", "--mqar_pairs=4,8", "--mqar_seed=5"]


def test_a_split_is_read_by_its_own_task_only(tmp_path):
    settings = copy.CopySettings(
        seq_len=8, length=2, vocab_size=8, batch_size=2, train_examples=2, eval_examples=2
    )
    folder = copy.TASK.write(tmp_path / "c", settings)["test"]
    assert copy.TASK.owns(folder) and not mqar.TASK.owns(folder)
    (folder / "mqar.json").write_text((folder / "copy.json").read_text())
    with pytest.raises(DataError, match=r"not a valid mqar split \(a copy split\)"):
        mqar.TASK.read(folder)
    record = json.loads((folder / "copy.json").read_text())
    assert record["task"] == "copy" and record["answers"] == 2 * 2  # rows x copied
