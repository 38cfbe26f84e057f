"""Counts of raw text (for word-level perplexity and bits per character) and bad input."""

from __future__ import annotations

import hashlib

import pytest

from partf.data import DataError, UsageError, text_stats
from tests.shared_data import wikitext2_file


def test_counts_match_a_hand_count(tmp_path):
    text = " = Title = \n \nÉtude in A @-@ minor .\n\nlast line without newline"
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    stats = text_stats(path)
    lines = text.split("\n")  # the final line has no newline, so split gives 5 lines
    assert stats.num_lines == len(lines) == 5
    assert stats.num_words == sum(len(line.split()) for line in lines) == 3 + 0 + 6 + 0 + 4
    assert stats.num_words_with_line_ends == stats.num_words + 5
    assert stats.num_chars == len(text)  # characters, not bytes: É is 2 bytes
    assert stats.num_bytes == len(text.encode("utf-8")) == stats.num_chars + 1
    assert stats.sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_wikitext_valid_counts(shared_data):
    stats = text_stats(shared_data / "wikitext-2" / "valid.txt")
    assert stats.num_lines == 3760  # the README's line count
    # 217,646: the word-level token count of WikiText-2 valid published with the data set.
    assert stats.num_words_with_line_ends == 217646
    assert stats.sha256 == "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"


def test_wikitext_train_counts():
    # All of train.txt: counting is plain Python over 10 MB, well under a second.
    stats = text_stats(wikitext2_file("train.txt"))
    assert stats.num_lines == 36718  # the shared data's README's line count
    # 2,088,628: the word-level token count of WikiText-2 train published with the data set.
    assert stats.num_words_with_line_ends == 2088628
    assert stats.sha256 == "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f"


def test_bad_input(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        text_stats(tmp_path / "missing.txt")
    with pytest.raises(UsageError, match="not a file"):
        text_stats(tmp_path)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="is empty"):
        text_stats(tmp_path / "empty.txt")
    (tmp_path / "latin1.txt").write_bytes("ok\nline two\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"line 3 of .* is not UTF-8") as info:
        text_stats(tmp_path / "latin1.txt")
    assert "\n" not in str(info.value)
