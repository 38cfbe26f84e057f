"""All-or-nothing outputs."""

from __future__ import annotations

import pytest

from partf.data import StagedOutputs, UsageError


def test_commit_moves_everything_in(tmp_path):
    target_dir, target_file = tmp_path / "a" / "b" / "records", tmp_path / "tok" / "m.model"
    with StagedOutputs() as staged:
        d = staged.dir_for(target_dir)
        (d / "x").write_text("x")
        staged.file_for(target_file).write_text("model")
        assert not target_dir.exists() and not target_file.exists()  # nothing until the end
    assert (target_dir / "x").read_text() == "x" and target_file.read_text() == "model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "tok"]
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["m.model"]


def test_failure_leaves_nothing_behind(tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "old").write_text("old")
    with pytest.raises(RuntimeError), StagedOutputs(overwrite=True) as staged:
        (staged.dir_for(tmp_path / "keep") / "new").write_text("new")
        staged.file_for(tmp_path / "made" / "deep" / "f").write_text("f")
        raise RuntimeError("build failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]  # made/ is removed again
    assert [p.name for p in (tmp_path / "keep").iterdir()] == ["old"]


def test_overwrite(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "old").write_text("old")
    with pytest.raises(UsageError, match="--overwrite"), StagedOutputs() as staged:
        staged.dir_for(tmp_path / "r")
    with StagedOutputs(overwrite=True) as staged:
        (staged.dir_for(tmp_path / "r") / "new").write_text("new")
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no .old or .tmp left
