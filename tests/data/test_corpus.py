"""Finding the three splits in a folder, and splitting one file of your own."""

from __future__ import annotations

import pytest

from partf.data import DataError, UsageError, find_splits, split_text_file


def test_find_splits(tiny_corpus, tmp_path):
    files = find_splits(tiny_corpus)
    assert {k: v.name for k, v in files.items()} == {
        "train": "train.txt",
        "valid": "valid.txt",
        "test": "test.txt",
    }
    assert find_splits(tiny_corpus, train_split="valid")["train"].name == "valid.txt"
    (tmp_path / "valid.txt").write_text("v\n")
    (tmp_path / "test.txt").write_text("t\n")
    with pytest.raises(UsageError, match="train.txt is missing.*--train_split=valid") as info:
        find_splits(tmp_path)
    assert "PARTF_TRAIN_SPLIT=valid" in str(info.value) and "\n" not in str(info.value)
    assert find_splits(tmp_path, "valid")["train"] == tmp_path / "valid.txt"
    (tmp_path / "test.txt").unlink()
    with pytest.raises(UsageError, match="test.txt is missing"):
        find_splits(tmp_path, "valid")
    with pytest.raises(UsageError, match="does not exist"):
        find_splits(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="is a file, not a folder; drop --from_directory"):
        find_splits(tmp_path / "valid.txt")


def test_split_text_file_keeps_lines_whole_and_in_order(tmp_path):
    lines = [f"line {i} é\n" for i in range(100)]
    source = tmp_path / "mine.txt"
    source.write_text("".join(lines), encoding="utf-8")
    files = split_text_file(source, tmp_path / "mine", holdout_fraction=0.1)
    parts = {k: p.read_text(encoding="utf-8") for k, p in files.items()}
    assert parts["train"] + parts["valid"] + parts["test"] == "".join(lines)
    assert parts["valid"] == "".join(lines[80:90]) and parts["test"] == "".join(lines[90:])
    with pytest.raises(UsageError, match="--overwrite"):
        split_text_file(source, tmp_path / "mine")
    split_text_file(source, tmp_path / "mine", holdout_fraction=0.2, overwrite=True)
    assert files["test"].read_text(encoding="utf-8") == "".join(lines[80:])
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == [
        "test.txt",
        "train.txt",
        "valid.txt",
    ]


def test_split_text_file_bad_input(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("one\ntwo\n")
    with pytest.raises(DataError, match="too few to split"):
        split_text_file(short, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    with pytest.raises(UsageError, match="holdout fraction"):
        split_text_file(short, tmp_path / "out", holdout_fraction=0.5)
    with pytest.raises(UsageError, match="does not exist"):
        split_text_file(tmp_path / "nope.txt", tmp_path / "out")
