"""Record folders: exact round trip, stream order across shards, metadata checks,
and the original project's records."""

from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from partf.data import (
    DataError,
    UsageError,
    build_records,
    context_batches,
    file_sha256,
    load_batches,
    load_tfrecords,
    parse_batch,
    read_batches,
    read_metadata,
    read_token_file,
    records_token_stream,
    serialize_batch,
    text_stats,
    tokenize_file,
    write_tfrecords,
)
from tests.shared_data import absent, wikitext2_file

BATCH, SEQ = 4, 16


@pytest.fixture(scope="module")
def built(tiny_corpus, tiny_tokenizer, tmp_path_factory):
    """valid.txt built twice: as 3 shards and as 1; plus its token stream."""
    root = tmp_path_factory.mktemp("records")
    text = tiny_corpus / "valid.txt"
    build_records(text, tiny_tokenizer, root / "three", BATCH, SEQ, shards=3)
    build_records(text, tiny_tokenizer, root / "one", BATCH, SEQ, shards=1)
    tokenize_file(text, tiny_tokenizer, root / "stream.int32")
    return {
        "three": root / "three",
        "one": root / "one",
        "stream": np.array(read_token_file(root / "stream.int32")),
        "text": text,
    }


def test_round_trip_is_exact(built):
    stream = built["stream"]
    recovered = records_token_stream(built["three"])
    n = (stream.size - 1) // (BATCH * SEQ)
    assert recovered.size == BATCH * n * SEQ + 1
    np.testing.assert_array_equal(recovered, stream[: recovered.size])
    # Only the final partial batch is lost, and the metadata counts it.
    meta = read_metadata(built["three"])
    assert meta.num_tokens == stream.size
    assert meta.num_lost_tokens == stream.size - recovered.size
    assert 0 <= meta.num_lost_tokens < BATCH * SEQ


def test_dataset_is_inputs_and_targets_in_stream_order(built, tiny_tokenizer):
    batches = read_batches(built["three"])
    np.testing.assert_array_equal(batches, context_batches(built["stream"], BATCH, SEQ))
    ds = load_tfrecords(built["three"], sp_model=tiny_tokenizer, batch_size=BATCH, seq_len=SEQ)
    assert ds.element_spec == (
        tf.TensorSpec([BATCH, SEQ], tf.int32),
        tf.TensorSpec([BATCH, SEQ], tf.int32),
    )
    assert int(ds.cardinality()) == batches.shape[0]
    pairs = list(ds.as_numpy_iterator())
    inputs = np.stack([x for x, _ in pairs])
    targets = np.stack([y for _, y in pairs])
    np.testing.assert_array_equal(inputs, batches[:, :, :-1])
    np.testing.assert_array_equal(targets, batches[:, :, 1:])
    # Contiguity: each row's targets end where the next batch's inputs begin.
    np.testing.assert_array_equal(inputs[1:, :, 0], targets[:-1, :, -1])


def test_shards_hold_consecutive_ranges(built):
    meta = read_metadata(built["three"])
    assert len(meta.shards) == 3 and sum(meta.shard_batches) == meta.num_batches
    assert max(meta.shard_batches) - min(meta.shard_batches) <= 1
    everything = read_batches(built["one"])
    np.testing.assert_array_equal(read_batches(built["three"]), everything)
    start = 0
    for name, count in zip(meta.shards, meta.shard_batches, strict=True):
        raw = tf.data.TFRecordDataset(str(built["three"] / name))
        shard = np.stack([parse_batch(r).numpy() for r in raw])
        np.testing.assert_array_equal(shard, everything[start : start + count])
        start += count


def test_metadata_describes_the_source(built, tiny_tokenizer):
    meta = read_metadata(built["three"])
    stats = text_stats(built["text"])
    assert (meta.batch_size, meta.seq_len, meta.overlap, meta.format_version) == (BATCH, SEQ, 1, 2)
    assert meta.num_lines == stats.num_lines and meta.num_words == stats.num_words
    assert meta.num_chars == stats.num_chars and meta.source_sha256 == stats.sha256
    assert meta.vocab_size == 120 and meta.eos_per_line is True
    assert meta.tokenizer_sha256 == file_sha256(tiny_tokenizer)


def test_reader_checks_tokenizer_and_shape(built, original_model, tmp_path):
    with pytest.raises(ValueError, match="is not the one the records .* were built with"):
        load_tfrecords(built["three"], sp_model=original_model)
    with pytest.raises(DataError, match="batch_size=4, not the 8"):
        load_tfrecords(built["three"], batch_size=8)
    with pytest.raises(DataError, match="seq_len=16, not the 32"):
        load_tfrecords(built["three"], seq_len=32)
    with pytest.raises(UsageError, match="do not exist"):
        load_tfrecords(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no metadata.json and no .tfrecords"):
        load_tfrecords(tmp_path / "empty")


def test_missing_shard_and_bad_metadata(built, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(built["three"], copy)
    meta = read_metadata(copy)
    (copy / meta.shards[1]).unlink()
    with pytest.raises(DataError, match="record shards missing"):
        load_tfrecords(copy)
    fields = json.loads((copy / "metadata.json").read_text())
    fields["format"] = 99
    (copy / "metadata.json").write_text(json.dumps(fields))
    with pytest.raises(DataError, match="written by a newer partf"):
        load_tfrecords(copy)


def test_original_records_load_and_are_contiguous(
    shared_data, original_artifacts, original_model, tmp_path
):
    path = original_artifacts / "tfrecords_valid"
    meta = read_metadata(path)
    assert (meta.format_version, meta.overlap) == (0, 0)
    assert (meta.num_batches, meta.batch_size, meta.seq_len) == (304, 32, 32)
    ds = load_tfrecords(path, sp_model=original_model)  # no metadata: warns, loads
    assert int(ds.cardinality()) == 304
    pairs = list(ds.as_numpy_iterator())
    assert len(pairs) == 304 and pairs[0][0].shape == (32, 32)
    batches = read_batches(path)
    np.testing.assert_array_equal(pairs[7][0], batches[7, :, :-1])
    np.testing.assert_array_equal(pairs[7][1], batches[7, :, 1:])
    assert read_metadata(path / "file1.tfrecords").num_batches == 304  # one file loads too

    # Contiguity, and our tokenization matching the original's: tokenize
    # valid.txt with the original model and without eos (the original dropped
    # line ends). Its records are non-overlapping windows of 33 tokens, batch i
    # row r being window i + r*stride, stride = num_tokens // (32*33), so row r
    # of batch i+1 directly follows row r of batch i in the stream. valid, not
    # train: checking every row needs the whole split tokenized, and valid is a
    # tenth of train's size (train's records get a cheaper check below).
    tokenize_file(
        shared_data / "wikitext-2" / "valid.txt", original_model, tmp_path / "t", add_eos=False
    )
    stream = np.array(read_token_file(tmp_path / "t"))
    stride = stream.size // (32 * 33)
    windows = stream[: stream.size // 33 * 33].reshape(-1, 33)
    index = np.arange(304)[:, None] + stride * np.arange(32)[None, :]
    np.testing.assert_array_equal(batches, windows[index])
    with pytest.raises(UsageError, match="original-format"):
        records_token_stream(path)


def test_original_train_records_follow_train_txt(original_artifacts, original_model, tmp_path):
    # The original's training records against the real training text. Tokenizing all
    # of train.txt (10 MB) would take most of a minute, so only its first 100 lines:
    # row 0 of batch i is window i of the stream, so they give the first batches' row 0.
    path = original_artifacts / "tfrecords_train"
    if not path.is_dir():
        absent(f"the original project's training records {path} are absent")
    assert read_metadata(path).num_batches == 2827  # as the shared data's README says
    head = tmp_path / "head.txt"
    with open(wikitext2_file("train.txt"), encoding="utf-8") as f:
        head.write_text("".join(itertools.islice(f, 100)), encoding="utf-8")
    tokenize_file(head, original_model, tmp_path / "t", add_eos=False)
    stream = np.array(read_token_file(tmp_path / "t"))
    count = stream.size // 33
    assert count > 100  # enough batches to mean something
    rows = np.stack([b[0] for b in load_batches(path).take(count).as_numpy_iterator()])
    np.testing.assert_array_equal(rows, stream[: count * 33].reshape(count, 33))


def test_write_tfrecords_refuses_too_many_shards(tmp_path):
    batches = context_batches(np.arange(1 + 2 * 3 * 4, dtype=np.int32), 2, 3)
    with pytest.raises(DataError, match="--shards=9 is more than the 4 batches"):
        write_tfrecords(batches, tmp_path / "r", shards=9)
    assert list(tmp_path.iterdir()) == []
    meta = write_tfrecords(batches, tmp_path / "r", shards=4)
    assert meta.shard_batches == (1, 1, 1, 1)
    np.testing.assert_array_equal(read_batches(tmp_path / "r"), batches)


def test_record_format_is_the_originals(tmp_path):
    """Each record: Example with bytes feature `batch` = serialize_tensor(int32 batch)."""
    batch = np.arange(2 * 5, dtype=np.int32).reshape(2, 5)
    example = tf.train.Example.FromString(serialize_batch(batch))
    serialized = example.features.feature["batch"].bytes_list.value[0]
    np.testing.assert_array_equal(tf.io.parse_tensor(serialized, tf.int32).numpy(), batch)
    assert serialized == tf.io.serialize_tensor(tf.constant(batch)).numpy()
