"""A study's data (`partf.study.data`): the records and tokenizer its runs read, the
partf-build-data commands that build its text and its [mqar] splits, and the build aside
that leaves either the whole output or nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import partf.study.data as study_data
from partf.study.data import build_command, prepare_data, records_of, task_command, tokenizer_of
from partf.study.paths import StudyPaths
from partf.study.plan import PlanError, load_plan

ARMS = """
[arms]
a = "--architecture='A D'"
"""
RECALL = """
seeds = [0]
[mqar]
seq_len = 64
batch_size = 8
pairs = [4, 8]
eval_pairs = 8
seed = 5
[arms]
soft = { task = "mqar", flags = "--architecture='A D'" }
"""


def plan_of(tmp_path: Path, text: str):
    path = tmp_path / "plan.toml"
    path.write_text("seeds = [0]\n" + text if text.startswith("[data]") else text)
    return load_plan(path)


def test_the_runs_read_the_plans_records_or_those_built_from_its_text(tmp_path):
    paths = StudyPaths(tmp_path / "out")
    given = plan_of(tmp_path, '[data]\ntrain = "records/train"\n' + ARMS)
    assert records_of(given, paths)["train"] == str(tmp_path / "records" / "train")
    assert tokenizer_of(given, paths) is None
    built = plan_of(tmp_path, '[data]\ntext = "corpus"\n' + ARMS)
    base = tmp_path / "out" / "data"
    assert records_of(built, paths) == {
        s: f"{base}/records_{s}" for s in ("train", "valid", "test")
    }
    assert tokenizer_of(built, paths) == str(base / "tokenizer" / "spm")
    named = plan_of(tmp_path, '[data]\ntext = "corpus"\nsp_model_prefix = "tok/spm"\n' + ARMS)
    assert tokenizer_of(named, paths) == str(tmp_path / "tok" / "spm")


def test_the_build_command_splits_one_file_or_reads_a_folder(tmp_path):
    paths, into = StudyPaths(tmp_path / "out"), tmp_path / "into"
    (tmp_path / "corpus").mkdir()
    (tmp_path / "all.txt").write_text("text\n")
    folder = build_command(plan_of(tmp_path, '[data]\ntext = "corpus"\n' + ARMS), paths, into)
    assert folder[:3] == [sys.executable, "-m", "partf.cli.build_data"]
    assert folder[3:5] == [f"--text_file={tmp_path / 'corpus'}", "--from_directory"]
    assert f"--tfrecords_directory={into / 'records'}" in folder
    assert (
        "--train_tokenizer" in folder
        and f"--sp_model_prefix={into / 'tokenizer' / 'spm'}" in folder
    )
    one = plan_of(
        tmp_path, '[data]\ntext = "all.txt"\nsp_model_prefix = "tok"\nseq_len = 64\n' + ARMS
    )
    command = build_command(one, paths, into)
    assert command[3:5] == [f"--source={tmp_path / 'all.txt'}", f"--text_file={into / 'text'}"]
    assert "--seq_len=64" in command and "--train_tokenizer" not in command
    assert command[-1] == f"--sp_model_prefix={tmp_path / 'tok'}"


def test_the_mqar_command_passes_each_setting_as_its_flag(tmp_path):
    command = task_command(plan_of(tmp_path, RECALL), "mqar", tmp_path / "into")
    assert "--task=mqar" in command and "--mqar_pairs=4,8" in command
    assert "--mqar_eval_pairs=8" in command and "--seq_len=64" in command
    assert "--mqar_seed=5" in command and "--batch_size=8" in command
    assert f"--tfrecords_directory={tmp_path / 'into' / 'mqar'}" in command


def test_missing_records_or_text_are_refused_before_anything_is_built(tmp_path):
    paths = StudyPaths(tmp_path / "out")
    records = plan_of(tmp_path, '[data]\ntrain = "records/train"\n' + ARMS)
    with pytest.raises(PlanError, match=r"\[data\] train .*records/train does not exist"):
        prepare_data(records, paths, print)
    text = plan_of(tmp_path, '[data]\ntext = "corpus"\n' + ARMS)
    with pytest.raises(PlanError, match=r"\[data\] text .*corpus does not exist"):
        prepare_data(text, paths, print)
    assert not paths.out.exists()


# A stand-in for partf-build-data --task=mqar: writes the splits into the folder it is
# given (as --tfrecords_directory=<into>/mqar names them) and counts its runs.
FAKE_BUILD = """
import pathlib, sys
into, count = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
count.write_text(count.read_text() + "x" if count.exists() else "x")
for split in ("train", "valid", "test"):
    (into / f"mqar_{split}").mkdir()
    (into / f"mqar_{split}" / "mqar.json").write_text("{}")
"""


def test_the_mqar_splits_are_built_aside_once_and_moved_in(tmp_path, monkeypatch):
    count = tmp_path / "count"
    monkeypatch.setattr(
        study_data,
        "task_command",
        lambda plan, name, into: [sys.executable, "-c", FAKE_BUILD, str(into), str(count)],
    )
    paths = StudyPaths(tmp_path / "out")
    final = paths.out / "data" / "mqar"
    (final / "mqar_train").mkdir(parents=True)  # left by a build that was cut short
    (final / "mqar_train" / "half").write_text("")
    (final / "other").mkdir()  # another build's output beside it stays
    said = []
    plan = plan_of(tmp_path, RECALL)
    prepare_data(plan, paths, said.append)
    assert sorted(p.name for p in final.iterdir()) == [
        "mqar_test",
        "mqar_train",
        "mqar_valid",
        "other",
    ]
    assert sorted(p.name for p in (final / "mqar_train").iterdir()) == ["mqar.json"]
    assert not (paths.out / "data" / "mqar.partial").exists()
    assert said == [f"building the mqar splits into {final}"]
    prepare_data(plan, paths, said.append)  # built already: nothing runs
    assert count.read_text() == "x" and len(said) == 1


def test_a_failed_build_names_its_source_and_leaves_nothing_in_place(tmp_path, monkeypatch):
    monkeypatch.setattr(
        study_data,
        "task_command",
        lambda plan, name, into: [sys.executable, "-c", "raise SystemExit(3)"],
    )
    paths = StudyPaths(tmp_path / "out")
    with pytest.raises(PlanError, match=r"partf-build-data failed \(status 3\) on the mqar"):
        prepare_data(plan_of(tmp_path, RECALL), paths, lambda line: None)
    assert not (paths.out / "data" / "mqar").exists()
