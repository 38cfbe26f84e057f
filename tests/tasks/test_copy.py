"""The copy task, added as one module (partf/tasks/copy.py) and nothing else: its splits
are built by partf-build-data, trained by partf-train and by partf-study, and its
accuracy reaches results.json, TensorBoard and the study's report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from partf import tasks
from partf.cli import build_data
from partf.errors import UsageError
from partf.tasks.copy import SEPARATOR, TASK, CopySettings, draw_split

SMALL = CopySettings(
    seq_len=12, length=4, vocab_size=20, batch_size=2, train_examples=16, eval_examples=4
)
#: A model small enough to train a few steps in seconds, without XLA.
MODEL = (
    "--d_model=16 --num_heads=2 --d_ffn=32 --num_layers=2 --mem_len=0 --cutoffs= "
    "--architecture='A D' --max_lr=3e-3 --warmup_steps=1 --steps_per_execution=2 "
    "--log_every=2 --eval_every=4 --ckpt_every=4 --jit_compile=False"
)


def test_each_row_is_scored_on_its_copy_alone():
    inputs, targets = draw_split(SMALL, "train")
    assert inputs.shape == targets.shape == (8, 2, 12)
    n = SMALL.length
    for x, y in zip(inputs.reshape(-1, 12), targets.reshape(-1, 12), strict=True):
        assert x[n] == SEPARATOR and (x[:n] >= 2).all()
        np.testing.assert_array_equal(x[n + 1 : 2 * n + 1], x[:n])  # the copy
        np.testing.assert_array_equal(np.flatnonzero(y), np.arange(n, 2 * n))
        np.testing.assert_array_equal(y[n : 2 * n], x[n + 1 : 2 * n + 1])  # next token
    again, _ = draw_split(SMALL, "train")
    np.testing.assert_array_equal(inputs, again)
    assert not np.array_equal(inputs[:2], draw_split(SMALL, "valid")[0])


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(UsageError, match="needs seq_len >= 9"):
        CopySettings(seq_len=8, length=4)


def test_the_registry_finds_it_and_no_other_module_names_it():
    assert tasks.get("copy") is TASK and "text+copy" in tasks.plan_names()
    assert tasks.plan_task("text+copy") == (tasks.records_task(), TASK)


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("copy")
    argv = ["--task=copy", "--seq_len=12", "--batch_size=2", "--vocab_size=20",
            "--copy_length=4", "--copy_train_examples=16", "--copy_eval_examples=4",
            f"--tfrecords_directory={root / 'copy'}"]  # fmt: skip
    assert build_data.run(argv) == 0
    return root


def test_partf_build_data_writes_its_splits(splits):
    for split in ("train", "valid", "test"):
        assert tasks.of_folder(splits / f"copy_{split}") is TASK
    settings, split, inputs, _ = TASK.read(splits / "copy_valid")
    assert settings == SMALL and split == "valid" and inputs.shape == (2, 2, 12)


def _scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from partf.study.records import event_scalars

    return event_scalars(logdir)


def test_partf_train_reports_its_accuracy(splits, tmp_path):
    import shlex

    from partf.cli.train import main

    argv = [f"--{s}_directory={splits / f'copy_{s}'}" for s in ("train", "valid", "test")]
    argv += [*shlex.split(MODEL), "--max_steps=8", "--sp_model_prefix=",
             f"--output_dir={tmp_path}", "--model_name=copy"]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((tmp_path / "checkpoints" / "copy" / "results.json").read_text())
    for split in ("valid", "test"):
        assert 0.0 <= results[split]["accuracy"] <= 1.0
        assert results[split]["num_tokens"] == 2 * 2 * 4  # the copied tokens alone
    scalars = _scalars(tmp_path / "logs" / "copy" / "valid")
    assert [step for step, _ in scalars["accuracy"]] == [4, 8]


PLAN = f"""
seeds = [0]
flags = "{MODEL} --max_steps=4"
[copy]
seq_len = 12
batch_size = 2
vocab_size = 20
length = 4
train_examples = 16
eval_examples = 4
[arms]
copier = {{ task = "copy" }}
"""


def test_partf_study_trains_it_and_reports_its_accuracy(tmp_path):
    plan, out = tmp_path / "plan.toml", tmp_path / "out"
    plan.write_text(PLAN)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-m", "partf.cli.study", str(plan), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "data" / "copy" / "copy_train" / "copy.json").is_file()
    run = out / "runs" / "copier-s0"
    results = json.loads((run / "checkpoints" / "copier-s0" / "results.json").read_text())
    test = 100 * results["test"]["accuracy"]
    assert "accuracy" in _scalars(run / "logs" / "copier-s0" / "valid")
    report = (out / "report.md").read_text()
    row = next(line for line in report.splitlines() if "test accuracy %" in line)
    copier = next(
        line
        for line in report.splitlines()[report.splitlines().index(row) :]
        if line.startswith("| copier")
    )
    assert f"{test:.1f}" in copier, copier


def test_a_plan_mixes_it_into_text_as_it_mixes_mqar(tmp_path):
    """`task = "text+copy"` composes the records task with this one: the text's records,
    the copy training split mixed in, its test split scored at the end."""
    from partf.study.paths import StudyPaths
    from partf.study.plan import load_plan
    from partf.study.runner import train_args

    plan = tmp_path / "plan.toml"
    table = PLAN.split("[copy]")[1].split("[arms]")[0]
    plan.write_text(
        f'[data]\ntrain = "rec_train"\n[copy]{table}[arms]\nboth = {{ task = "text+copy" }}\n'
    )
    loaded = load_plan(plan)
    paths = StudyPaths(tmp_path / "out")
    argv = train_args(loaded, paths, loaded.runs()[0])
    base = paths.out / "data" / "copy" / "copy"
    assert f"--train_directory={tmp_path / 'rec_train'}" in argv
    assert f"--mix_directory={base}_train" in argv and f"--recall_directory={base}_test" in argv
