"""Counts of a raw text file: lines, words, characters, and its sha256.

Language-model losses are measured per token of the tokenizer, but results are
reported per word (word-level perplexity) or per character (bits per
character). Those conversions need the counts of the raw text, which
`text_stats` computes in one streaming pass that also checks the file is UTF-8.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from partf.errors import DataError, UsageError


@dataclasses.dataclass(frozen=True)
class TextStats:
    """Counts of one text file, as the record builder reads it line by line.

    Attributes:
        num_lines: lines, counted the way `tf.data.TextLineDataset` yields
            them: a final line without a newline counts, a final newline does
            not start an empty line. Each line becomes one end-of-line token.
        num_words: whitespace-separated words, line ends not included.
        num_chars: Unicode characters, newlines included.
        num_bytes: size of the file in bytes.
        sha256: hex sha256 of the file's bytes.
    """

    num_lines: int
    num_words: int
    num_chars: int
    num_bytes: int
    sha256: str

    @property
    def num_words_with_line_ends(self) -> int:
        """Words plus one end-of-line per line: the divisor of word-level perplexity (the
        WikiText convention: each line closes with `<eos>`, predicted like a word)."""
        return self.num_words + self.num_lines


def file_sha256(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> str:
    """Returns the hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def text_stats(path: str | os.PathLike) -> TextStats:
    """`TextStats` of a UTF-8 text file, read line by line in one pass. UsageError when the
    path is not a file; DataError when it is empty or a line is not valid UTF-8 (the
    message gives the line number).

    Example:
        >>> stats = text_stats("data/wikitext-2/valid.txt")
        >>> stats.num_lines, stats.num_words_with_line_ends
        (3760, 217646)"""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"text file {path} does not exist; check the path")
    if not path.is_file():
        raise UsageError(f"{path} is not a file; give the path of a text file")
    digest = hashlib.sha256()
    num_lines = num_words = num_chars = num_bytes = 0
    with open(path, "rb") as f:
        for num_lines, raw in enumerate(f, start=1):
            digest.update(raw)
            num_bytes += len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"line {num_lines} of {path} is not UTF-8 (byte {e.start} of the line: "
                    f"{raw[e.start : e.start + 4]!r}); convert the file to UTF-8, "
                    f"e.g. iconv -f latin1 -t utf-8"
                ) from None
            num_chars += len(line)
            num_words += len(line.split())
    if num_bytes == 0:
        raise DataError(f"text file {path} is empty; give a file with text in it")
    return TextStats(
        num_lines=num_lines,
        num_words=num_words,
        num_chars=num_chars,
        num_bytes=num_bytes,
        sha256=digest.hexdigest(),
    )
