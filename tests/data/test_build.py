"""Building tokenizer and record folders together: all of it, or nothing."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from partf.data import (
    DataError,
    UsageError,
    build_data,
    build_records,
    file_sha256,
    find_splits,
    load_sentencepiece,
    read_metadata,
    read_token_file,
    records_token_stream,
    tokenize_file,
)


def listing(root) -> list[str]:
    """Every path under root, hidden temporary ones included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def corpus_build(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    splits = find_splits(tiny_corpus)
    dirs = {split: out / f"records_{split}" for split in splits}
    metas = build_data(
        splits,
        dirs,
        out / "tok" / "tiny",
        train_tokenizer_on=splits["train"],
        vocab_size=100,
        batch_size=3,
        seq_len=10,
        shards=2,
    )
    return out, splits, dirs, metas


def test_build_data_writes_tokenizer_and_three_folders(corpus_build):
    out, splits, dirs, metas = corpus_build
    assert listing(out / "tok") == ["tiny.model", "tiny.vocab"]
    assert load_sentencepiece(out / "tok" / "tiny.model").get_piece_size() == 100
    sha = file_sha256(out / "tok" / "tiny.model")
    for split, meta in metas.items():
        assert read_metadata(dirs[split]) == meta
        assert meta.tokenizer_sha256 == sha and meta.tokenizer_file == "tiny.model"
        assert meta.source_sha256 == file_sha256(splits[split])
        assert (meta.batch_size, meta.seq_len, len(meta.shards)) == (3, 10, 2)
    assert not [p for p in listing(out) if ".tmp-" in p or ".old-" in p]


def test_existing_outputs_need_overwrite(corpus_build, tmp_path):
    built, splits, built_dirs, _ = corpus_build
    out = tmp_path / "copy"  # work on a copy: the module's build stays as it was
    shutil.copytree(built, out)
    dirs = {split: out / path.name for split, path in built_dirs.items()}
    before = listing(out)
    with pytest.raises(UsageError, match="already exists; pass --overwrite"):
        build_data(splits, dirs, out / "tok" / "tiny", train_tokenizer_on=splits["train"])
    assert listing(out) == before
    # With overwrite, reusing the tokenizer, a new batch shape replaces the folders.
    build_data(splits, dirs, out / "tok" / "tiny", batch_size=2, seq_len=5, overwrite=True)
    assert read_metadata(dirs["test"]).batch_size == 2
    assert listing(out) != before and listing(out / "tok") == ["tiny.model", "tiny.vocab"]


def test_one_bad_split_leaves_nothing(tiny_corpus, tmp_path):
    texts = {"train": tiny_corpus / "train.txt", "valid": tmp_path / "short.txt"}
    texts["valid"].write_text("the war\n", encoding="utf-8")
    dirs = {s: tmp_path / "out" / f"r_{s}" for s in texts}
    with pytest.raises(DataError, match="short.txt: the text gives .* fewer than one batch"):
        build_data(
            texts,
            dirs,
            tmp_path / "out" / "tok" / "m",
            train_tokenizer_on=texts["train"],
            vocab_size=60,
        )
    assert listing(tmp_path) == ["short.txt"]  # not even out/ or out/tok/


@pytest.mark.parametrize(
    "content,error,match",
    [
        (b"", DataError, "is empty"),
        (b"fine\n\xff\xfe broken\n", DataError, "line 2 of .* is not UTF-8"),
        (b"the war\n", DataError, "fewer than one batch"),
    ],
)
def test_bad_text(tiny_tokenizer, tmp_path, content, error, match):
    text = tmp_path / "in.txt"
    text.write_bytes(content)
    with pytest.raises(error, match=match) as info:
        build_records(text, tiny_tokenizer, tmp_path / "records", batch_size=4, seq_len=8)
    assert "\n" not in str(info.value)
    assert listing(tmp_path) == ["in.txt"]


def test_bad_arguments(tiny_corpus, tiny_tokenizer, tmp_path):
    text = tiny_corpus / "valid.txt"
    for kwargs, match in [
        ({"batch_size": 0}, "--batch_size must be a positive integer"),
        ({"seq_len": -3}, "--seq_len must be a positive integer"),
        ({"shards": 0}, "--shards must be a positive integer"),
    ]:
        with pytest.raises(UsageError, match=match):
            build_records(text, tiny_tokenizer, tmp_path / "r", **kwargs)
    with pytest.raises(UsageError, match="does not exist"):
        build_records(tmp_path / "missing.txt", tiny_tokenizer, tmp_path / "r")
    with pytest.raises(UsageError, match="--train_tokenizer"):
        build_records(text, tmp_path / "missing.model", tmp_path / "r")
    assert listing(tmp_path) == []


def test_round_trip_through_build_data(corpus_build, tmp_path):
    out, splits, dirs, _ = corpus_build
    tokenize_file(splits["valid"], out / "tok" / "tiny.model", tmp_path / "valid.int32")
    stream = np.array(read_token_file(tmp_path / "valid.int32"))
    recovered = records_token_stream(dirs["valid"])
    np.testing.assert_array_equal(recovered, stream[: recovered.size])


def test_building_records_shows_lines_and_batches_done_with_an_eta(
    tiny_corpus, tiny_tokenizer, tmp_path, capsys, monkeypatch
):
    """A progress line after every step (not every 10 s): the count done of the total,
    a rate and an ETA, on stderr."""
    import re

    monkeypatch.setattr("partf.console.EVERY_SECONDS", 0.0)
    meta = build_records(tiny_corpus / "valid.txt", tiny_tokenizer, tmp_path / "r", 3, 10)
    err = capsys.readouterr().err.splitlines()
    eta = r"\([\d.]+%\), [\d.]+ (lines|batches)/s.*, elapsed \d+:\d\d:\d\d, ETA \S+"
    tokenizing = [line for line in err if line.startswith("partf: tokenizing valid.txt: ")]
    assert tokenizing and re.fullmatch(
        rf"partf: tokenizing valid.txt: 300/300 {eta}", tokenizing[-1]
    )
    writing = [line for line in err if line.startswith("partf: writing records: ")]
    assert len(writing) == meta.num_batches - 1  # every batch after the first
    total = meta.num_batches
    assert re.fullmatch(rf"partf: writing records: {total:,}/{total:,} {eta}", writing[-1])
    assert "tok/s" in writing[-1]
