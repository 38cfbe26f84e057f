"""Atomic writes: a reader sees the old file or the new one, and no temporary file stays."""

from __future__ import annotations

import os

import pytest

from partf.atomic import atomic_path, atomic_write_text


def test_atomic_text_write_replaces_whole_files(tmp_path):
    target = tmp_path / "results.json"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["results.json"]


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "plot.png"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.endswith("plot.png")
        tmp.write_text("half")
        raise RuntimeError("the writer failed")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["plot.png"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["plot.png"]
