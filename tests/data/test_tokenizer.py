"""Tokenizer training settings and in-graph tokenization with one eos per line."""

from __future__ import annotations

import numpy as np
import pytest

from partf.data import (
    EOS_ID,
    DataError,
    UsageError,
    load_sentencepiece,
    read_token_file,
    text_stats,
    tokenize_file,
    train_tokenizer,
)
from tests.data.conftest import TINY_VOCAB


def test_original_settings(tiny_tokenizer):
    sp = load_sentencepiece(tiny_tokenizer)
    assert sp.get_piece_size() == TINY_VOCAB
    assert [sp.id_to_piece(i) for i in range(4)] == ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
    # @-@ is one user-defined piece, kept whole.
    at = sp.piece_to_id("@-@")
    assert sp.is_control(at) is False and at not in (0, 1, 2, 3)
    assert at in sp.encode("well @-@ known")
    # nfkc_cf folds case: upper and lower case give the same ids.
    assert sp.encode("The Battle SERIES") == sp.encode("the battle series")
    assert tiny_tokenizer.with_suffix(".vocab").is_file()


def test_tokenize_file_ends_every_line_with_eos(tiny_corpus, tiny_tokenizer, tmp_path):
    text = tiny_corpus / "valid.txt"
    out = tmp_path / "valid.tokens"
    num_tokens = tokenize_file(text, tiny_tokenizer, out, lines_per_step=7)
    tokens = np.asarray(read_token_file(out))
    assert tokens.shape == (num_tokens,)
    # Reference: the sentencepiece library, line by line. Its segmentation may break
    # exact ties ("000" as 0+00 or 00+0) differently from tensorflow-text's copy, so
    # compare each line's decoded text, which ties do not change.
    sp = load_sentencepiece(tiny_tokenizer)
    lines = text.read_text(encoding="utf-8").splitlines()
    assert tokens[-1] == EOS_ID
    per_line = np.split(tokens[:-1], np.nonzero(tokens[:-1] == EOS_ID)[0] + 1)
    assert len(per_line) == len(lines) == text_stats(text).num_lines
    for ids, line in zip(per_line, lines, strict=True):
        ids = ids[:-1] if ids.size and ids[-1] == EOS_ID else ids
        assert EOS_ID not in ids
        assert sp.decode(ids.tolist()) == sp.decode(sp.encode(line))
    assert sp.encode(" ") == [] and " " in lines  # blank lines exist: each is a lone eos
    assert sum(1 for ids in per_line if ids.tolist() == [EOS_ID]) == lines.count(" ")


def test_file_without_final_newline_and_no_eos(tiny_tokenizer, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the war\n\nthe game", encoding="utf-8")
    n = tokenize_file(text, tiny_tokenizer, tmp_path / "a.tokens")
    tokens = read_token_file(tmp_path / "a.tokens")
    assert list(tokens).count(EOS_ID) == 3 and tokens[-1] == EOS_ID
    m = tokenize_file(text, tiny_tokenizer, tmp_path / "b.tokens", add_eos=False)
    assert m == n - 3 and EOS_ID not in read_token_file(tmp_path / "b.tokens")


def test_vocab_too_large_names_the_limit(tiny_corpus, tmp_path):
    with pytest.raises(DataError, match=r"--vocab_size=5000 is more than .*at most \d+") as info:
        train_tokenizer(tiny_corpus / "valid.txt", tmp_path / "big", vocab_size=5000)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []  # no model, no staging folder


def test_training_refuses_to_overwrite(tiny_corpus, tiny_tokenizer, tmp_path):
    before = tiny_tokenizer.read_bytes()
    with pytest.raises(UsageError, match="--overwrite"):
        train_tokenizer(tiny_corpus / "train.txt", tiny_tokenizer, vocab_size=TINY_VOCAB)
    assert tiny_tokenizer.read_bytes() == before
    with pytest.raises(UsageError, match="at least 5"):
        train_tokenizer(tiny_corpus / "train.txt", tmp_path / "m", vocab_size=4)
    with pytest.raises(UsageError, match="does not exist"):
        train_tokenizer(tmp_path / "missing.txt", tmp_path / "m", vocab_size=50)
    with pytest.raises(UsageError, match="--train_tokenizer"):
        load_sentencepiece(tmp_path / "missing.model")
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match="not a SentencePiece model"):
        load_sentencepiece(tmp_path / "junk.model")


def test_mask_symbol_is_opt_in(tiny_corpus, tiny_tokenizer, tmp_path):
    from partf.data import MASK_PIECE, mask_id_of

    assert mask_id_of(tiny_tokenizer) is None  # the original's settings have none
    model = train_tokenizer(
        tiny_corpus / "train.txt", tmp_path / "masked", vocab_size=TINY_VOCAB, mask_symbol=True
    )
    sp = load_sentencepiece(model)
    assert mask_id_of(model) == 5 and sp.id_to_piece(5) == MASK_PIECE
    assert sp.get_piece_size() == TINY_VOCAB
    # The special ids and @-@ keep theirs; [MASK] is never produced from text.
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id(), sp.piece_to_id("@-@")) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert 5 not in sp.encode("the mask is not [ mask ] here")
