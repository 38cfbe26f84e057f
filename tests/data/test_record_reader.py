"""The records reader without TensorFlow: the same batches as the tf.data reader (partf's
records and the original project's), every CRC checked, and the wire format beneath it."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from partf.data import DataError, build_records, load_batches, read_metadata, serialize_batch
from partf.data.record_reader import read_record_batches, read_records_metadata
from partf.data.tfrecord_format import (
    WireError,
    crc32c,
    crc32c_rows,
    decode_tensor,
    encode_varint,
    example_bytes_feature,
    fields,
    frame,
    read_frames,
    signed,
)

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
    assert read_records_metadata(built) == read_metadata(built)


def test_the_original_projects_records_equal_the_tf_reader(original_artifacts):
    for split in ("valid", "test"):
        folder = original_artifacts / f"tfrecords_{split}"
        batches = read_record_batches(folder)
        np.testing.assert_array_equal(batches, _tf_batches(folder))
        # Their metadata is inferred from the records, as read_metadata does with TF.
        assert read_records_metadata(folder) == read_metadata(folder)


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


def test_crc32c_known_values_and_rows():
    # RFC 3720, B.4: CRC-32C of "123456789" and of 32 zero bytes.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    rows = np.random.default_rng(0).integers(0, 256, size=(40, 13), dtype=np.uint8)
    # The numpy path (40 rows, >= 32) agrees with the byte loop.
    assert crc32c_rows(rows).tolist() == [crc32c(row.tobytes()) for row in rows]


def test_frames_round_trip_and_checks():
    payloads = [b"", b"a", bytes(range(256)) * 3]
    buffer = b"".join(frame(p) for p in payloads)
    assert [bytes(p) for p in read_frames(buffer)] == payloads
    damaged = bytearray(buffer)
    damaged[3] ^= 0x10  # inside the first length: its CRC catches it
    with pytest.raises(ValueError, match="corrupted record at 0 after 0 good records"):
        read_frames(bytes(damaged))


def test_example_and_tensor_decoding_match_tensorflow():
    batch = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    (serialized,) = example_bytes_feature(serialize_batch(batch), "batch")
    tensor = decode_tensor(serialized)
    np.testing.assert_array_equal(tensor.array, batch)
    with pytest.raises(WireError, match="no feature 'tokens'"):
        example_bytes_feature(serialize_batch(batch), "tokens")


def test_int_val_tensors_and_signed_varints():
    import tensorflow as tf

    # A TensorProto with int_val (not tensor_content), as other writers may store it.
    proto = tf.make_tensor_proto([[-1, 2], [3, -4]], dtype=tf.int32)
    proto.ClearField("tensor_content")
    proto.int_val.extend([-1, 2, 3, -4])
    np.testing.assert_array_equal(
        decode_tensor(proto.SerializeToString()).array, [[-1, 2], [3, -4]]
    )
    assert signed(struct.unpack("<Q", struct.pack("<q", -5))[0], 32) == -5
    assert list(fields(b"\x08" + encode_varint(300))) == [(1, 0, 300)]
