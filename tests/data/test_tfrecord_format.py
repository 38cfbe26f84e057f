"""The TFRecord wire format without TensorFlow: CRC-32C, record frames, varints, and
Example and TensorProto decoding checked against TensorFlow's encoding."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from partf.data import serialize_batch
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
