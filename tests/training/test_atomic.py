"""Atomic writes: a reader sees the old file or the new one, and no temporary file stays."""

from __future__ import annotations

import os

from partf.training.atomic import atomic_write_text


def test_atomic_text_write_replaces_whole_files(tmp_path):
    target = tmp_path / "results.json"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["results.json"]
