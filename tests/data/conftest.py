"""Fixtures shared by the data tests: one synthetic corpus and one tiny tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.helpers import write_corpus

TINY_VOCAB = 120


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """Folder with train.txt (1500 lines), valid.txt and test.txt (300 lines each)."""
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_corpus: Path, tmp_path_factory) -> Path:
    """A 120-piece SentencePiece model trained on tiny_corpus/train.txt."""
    from partf.data import train_tokenizer

    prefix = tmp_path_factory.mktemp("tokenizer") / "tiny"
    return train_tokenizer(tiny_corpus / "train.txt", prefix, vocab_size=TINY_VOCAB)


@pytest.fixture(scope="session")
def original_model(original_artifacts: Path) -> Path:
    """The original project's 12k SentencePiece model."""
    return original_artifacts / "tokenizer" / "wiki2_12k.model"
