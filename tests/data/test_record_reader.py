"""The records reader without TensorFlow: the same batches as the tf.data reader (partf's
records and the original project's), every CRC checked. The wire format beneath it is
tested in test_tfrecord_format.py."""

from __future__ import annotations

import numpy as np
import pytest

from partf.data import DataError, build_records, load_batches
from partf.data.record_reader import read_record_batches, read_records_metadata

BATCH, SEQ = 4, 16


def _tf_batches(path) -> np.ndarray:
    return np.stack(list(load_batches(path).as_numpy_iterator()))


@pytest.fixture(scope="module")
def built(tiny_corpus, tiny_tokenizer, tmp_path_factory):
    """valid.txt as partf-build-data writes it: three shards."""
    folder = tmp_path_factory.mktemp("reader") / "valid"
    build_records(tiny_corpus / "valid.txt", tiny_tokenizer, folder, BATCH, SEQ, shards=3)
    return folder


def test_partf_records_equal_the_tf_reader(built, tiny_tokenizer):
    batches = read_record_batches(built, tiny_tokenizer, batch_size=BATCH, seq_len=SEQ)
    assert batches.dtype == np.int32 and batches.shape[1:] == (BATCH, SEQ + 1)
    np.testing.assert_array_equal(batches, _tf_batches(built))


def test_the_original_projects_records_equal_the_tf_reader(original_artifacts):
    for split in ("valid", "test"):
        folder = original_artifacts / f"tfrecords_{split}"
        batches = read_record_batches(folder)
        np.testing.assert_array_equal(batches, _tf_batches(folder))
        # Their metadata is inferred: the first record's shape, every record counted.
        meta = read_records_metadata(folder)
        assert (meta.num_batches, meta.batch_size, meta.seq_len + 1) == batches.shape
        assert meta.shards == ("file1.tfrecords",) and meta.format_version == 0


def test_a_file_that_is_not_records_is_named_in_one_line(tmp_path):
    (tmp_path / "train.tfrecords").write_bytes(b"not a record\n")
    with pytest.raises(DataError) as caught:
        read_records_metadata(tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'train.tfrecords'} does not hold context-batch")
    assert message.endswith("build records with partf-build-data")


def test_a_corrupted_byte_is_one_line(built, tmp_path):
    damaged = tmp_path / "valid"
    damaged.mkdir()
    for file in built.iterdir():
        (damaged / file.name).write_bytes(file.read_bytes())
    shard = sorted(damaged.glob("*.tfrecords"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(DataError) as caught:
        read_record_batches(damaged)
    message = str(caught.value)
    assert "\n" not in message
    assert f"records in {shard} are truncated or corrupt (corrupted record at" in message
    assert message.endswith("rebuild them with partf-build-data --overwrite")


def test_a_truncated_file_is_one_line(built, tmp_path):
    shard = tmp_path / "file1.tfrecords"
    data = sorted(built.glob("*.tfrecords"))[0].read_bytes()
    shard.write_bytes(data[:-3])
    with pytest.raises(DataError, match=r"truncated record at \d+\) after \d+ good batches"):
        read_record_batches(shard)
