"""The TFRecord file framing and the protobuf wire format, in Python and numpy: enough to
read partf's records and write TensorBoard event files without protobuf or TensorFlow
(a JAX-only machine).

A TFRecord is `uint64 length | uint32 masked CRC-32C of length | data | uint32 masked
CRC-32C of data` (little-endian). A protobuf message is a sequence of (field number,
wire type, value); `fields` walks one message and the `encode_*` helpers write one field.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

# ------------------------------------------------------------------- CRC-32C
_POLY = 0x82F63B78  # Castagnoli, bit-reflected


def _table() -> np.ndarray:
    table = np.zeros(256, np.uint32)
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table[byte] = crc
    return table


_TABLE = _table()
_TABLE_LIST = [int(v) for v in _TABLE]

#: With at least this many equal-length rows, numpy steps through them together (one
#: array operation per byte column); fewer go byte by byte in Python, which is cheaper
#: per byte than a numpy call on a tiny array.
_ROWS_FOR_NUMPY = 32
#: Records whose data CRCs `read_frames` computes together, at most.
_CHUNK = 4096


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C of `data` (a byte-at-a-time loop: for short inputs)."""
    table, crc = _TABLE_LIST, 0xFFFFFFFF
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c_rows(rows: np.ndarray) -> np.ndarray:
    """CRC-32C of every row of a uint8 array [n, m], as uint32 [n].

    All rows advance together, one byte column per step, so n records of one length cost
    m numpy operations instead of n * m Python ones.
    """
    rows = np.asarray(rows, np.uint8)
    if rows.shape[0] < _ROWS_FOR_NUMPY:
        return np.array([crc32c(row.tobytes()) for row in rows], np.uint32)
    crc = np.full(rows.shape[0], 0xFFFFFFFF, np.uint32)
    columns = np.ascontiguousarray(rows.T)  # one contiguous column per step
    for column in columns:
        crc = _TABLE[(crc ^ column) & 0xFF] ^ (crc >> 8)
    return crc ^ np.uint32(0xFFFFFFFF)


def mask(crc: int | np.ndarray) -> int | np.ndarray:
    """TFRecord's masked CRC: rotated right by 15 bits, plus a constant (mod 2**32)."""
    if isinstance(crc, np.ndarray):
        crc = crc.astype(np.uint64)  # room for the shifted bits
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# ------------------------------------------------------------------- framing
def frame(data: bytes) -> bytes:
    """One record, framed: length, its masked CRC, the data, the data's masked CRC."""
    length = struct.pack("<Q", len(data))
    return (
        length
        + struct.pack("<I", mask(crc32c(length)))
        + data
        + struct.pack("<I", mask(crc32c(data)))
    )


class FrameError(ValueError):
    """A file is not a well-formed sequence of records: `detail` says what is wrong in a
    few words ("corrupted record at 1234"), `good` counts the records intact before it."""

    def __init__(self, detail: str, good: int) -> None:
        super().__init__(f"{detail} after {good} good records")
        self.detail = detail
        self.good = good


def read_frames(buffer: bytes) -> list[memoryview]:
    """Each record's data (views into the whole file `buffer`), in order, every CRC
    checked; FrameError for a truncated file or a CRC that does not match."""
    view = memoryview(buffer)
    spans: list[tuple[int, int, int]] = []  # (start of the record, data offset, length)
    offset = 0
    while offset < len(buffer):
        if offset + 12 > len(buffer):
            raise FrameError(f"truncated record at {offset}", len(spans))
        length, length_crc = struct.unpack_from("<QI", buffer, offset)
        if mask(crc32c(view[offset : offset + 8])) != length_crc:
            raise FrameError(f"corrupted record at {offset}", len(spans))
        if offset + 12 + length + 4 > len(buffer):
            raise FrameError(f"truncated record at {offset}", len(spans))
        spans.append((offset, offset + 12, length))
        offset += 12 + length + 4
    # The data CRCs of all records of one length are computed together.
    bad = len(spans)
    by_length: dict[int, list[int]] = {}
    for index, (_, _, length) in enumerate(spans):
        by_length.setdefault(length, []).append(index)
    raw = np.frombuffer(buffer, np.uint8)
    for length, indices in by_length.items():
        # In chunks, so the copies made for the column-wise pass stay small.
        for first in range(0, len(indices), _CHUNK):
            chunk = indices[first : first + _CHUNK]
            starts = [spans[i][1] for i in chunk]
            rows = np.stack([raw[start : start + length] for start in starts])
            stored = np.array(
                [struct.unpack_from("<I", buffer, start + length)[0] for start in starts],
                np.uint64,
            )
            wrong = np.nonzero(mask(crc32c_rows(rows)) != stored)[0]
            if wrong.size:
                bad = min(bad, chunk[int(wrong[0])])
                break
    if bad < len(spans):
        raise FrameError(f"corrupted record at {spans[bad][0]}", bad)
    return [view[start : start + length] for _, start, length in spans]


# ---------------------------------------------------------- protobuf: reading
VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """Bytes that are not the protobuf message expected."""


def _varint(buffer: memoryview, offset: int) -> tuple[int, int]:
    """The varint at `offset` and the offset after it."""
    value = shift = 0
    while True:
        if offset >= len(buffer) or shift > 63:
            raise WireError("a varint runs past the end of the message")
        byte = buffer[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7


def fields(message: bytes | memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of each field of one protobuf message, in order.

    Values: an int for varints and fixed-size fields (unsigned; see `signed`), a
    memoryview for length-delimited ones (bytes, strings, sub-messages, packed arrays).
    WireError for bytes that do not parse as a message.
    """
    buffer = memoryview(message)
    offset = 0
    while offset < len(buffer):
        key, offset = _varint(buffer, offset)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, offset = _varint(buffer, offset)
        elif wire == FIXED64:
            value, offset = int.from_bytes(buffer[offset : offset + 8], "little"), offset + 8
        elif wire == FIXED32:
            value, offset = int.from_bytes(buffer[offset : offset + 4], "little"), offset + 4
        elif wire == BYTES:
            size, offset = _varint(buffer, offset)
            value, offset = buffer[offset : offset + size], offset + size
        else:
            raise WireError(f"unsupported wire type {wire} (field {number})")
        if offset > len(buffer):
            raise WireError(f"field {number} runs past the end of the message")
        yield number, wire, value


def signed(value: int, bits: int = 64) -> int:
    """A varint read as an unsigned number, as the signed int32/int64 it encodes."""
    value &= (1 << 64) - 1
    value = value - (1 << 64) if value >> 63 else value
    if bits == 32:  # an int32 is sign-extended to 64 bits on the wire
        value = ((value + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    return value


def packed_varints(data: memoryview) -> list[int]:
    """The numbers of a packed repeated varint field."""
    values, offset = [], 0
    while offset < len(data):
        value, offset = _varint(data, offset)
        values.append(value)
    return values


# ---------------------------------------------------------- protobuf: writing
def encode_varint(value: int) -> bytes:
    """A non-negative number (or a negative int64, as 10 bytes) as a varint."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_key(number: int, wire: int) -> bytes:
    """A field's key: its number and wire type."""
    return encode_varint(number << 3 | wire)


def encode_bytes(number: int, data: bytes) -> bytes:
    """A length-delimited field (bytes, a string's UTF-8, a sub-message)."""
    return encode_key(number, BYTES) + encode_varint(len(data)) + data


def encode_int(number: int, value: int) -> bytes:
    """A varint field (int32, int64, enum, bool)."""
    return encode_key(number, VARINT) + encode_varint(value)


def encode_double(number: int, value: float) -> bytes:
    """A double field."""
    return encode_key(number, FIXED64) + struct.pack("<d", value)


# ------------------------------------------------------------ TensorProto
#: tensorflow/core/framework/types.proto: DataType numbers and the numpy dtypes they hold.
DT_FLOAT, DT_INT32, DT_STRING, DT_INT64 = 1, 3, 7, 9
_NUMPY = {DT_FLOAT: np.dtype("<f4"), DT_INT32: np.dtype("<i4"), DT_INT64: np.dtype("<i8")}


@dataclass(frozen=True)
class Tensor:
    """A decoded TensorProto: its DataType number and its values."""

    dtype: int
    array: np.ndarray


def decode_tensor(message: bytes | memoryview) -> Tensor:
    """A numeric TensorProto (tensor_content, or int_val / int64_val) as a numpy array;
    WireError for an unsupported dtype or values that do not fill the shape."""
    dtype, dims, content, values = 0, [], None, []
    for number, wire, value in fields(message):
        if number == 1:  # dtype
            dtype = int(value)
        elif number == 2:  # tensor_shape: TensorShapeProto, dim = 2 {size = 1}
            for dim_number, _, dim in fields(value):
                if dim_number == 2:
                    size = next((signed(v) for n, _, v in fields(dim) if n == 1), 0)
                    dims.append(size)
        elif number == 4:  # tensor_content: the raw little-endian values
            content = bytes(value)
        elif number in (7, 10):  # int_val (int32), int64_val
            raw = packed_varints(value) if wire == BYTES else [value]
            values.extend(signed(v, 32 if number == 7 else 64) for v in raw)
    if dtype not in _NUMPY:
        raise WireError(f"tensor dtype {dtype} is not int32, int64 or float32")
    count = int(np.prod(dims)) if dims else 1
    if content is not None:
        array = np.frombuffer(content, _NUMPY[dtype])
    elif len(values) == 1 and count > 1:  # a constant tensor stores one value
        array = np.full(count, values[0], _NUMPY[dtype])
    else:
        array = np.array(values, _NUMPY[dtype])
    if array.size != count:
        raise WireError(f"tensor holds {array.size} values for shape {dims}")
    return Tensor(dtype, array.reshape(dims).astype(_NUMPY[dtype].newbyteorder("=")))


def encode_scalar_tensor(value: float) -> bytes:
    """A float32 scalar TensorProto (dtype, an empty shape, tensor_content), as
    TensorFlow's summary ops write it."""
    return (
        encode_int(1, DT_FLOAT)
        + encode_bytes(2, b"")
        + encode_bytes(4, np.float32(value).astype("<f4").tobytes())
    )


def encode_string_tensor(items: list[bytes]) -> bytes:
    """A string vector TensorProto (dtype, shape [len(items)], string_val)."""
    shape = encode_bytes(2, encode_int(1, len(items)))  # TensorShapeProto.dim {size}
    out = encode_int(1, DT_STRING) + encode_bytes(2, shape)
    return out + b"".join(encode_bytes(8, item) for item in items)


# --------------------------------------------------------- tf.train.Example
def example_bytes_feature(message: bytes | memoryview, name: str) -> list[bytes]:
    """The values of the bytes feature `name` of a serialized `tf.train.Example`.

    Example -> features (1) -> feature map entries (1: key 1, value 2) -> Feature ->
    bytes_list (1) -> value (1). WireError when the message has no bytes feature `name`.
    """
    key = name.encode()
    for number, _, features in fields(message):
        if number != 1:
            continue
        for entry_number, _, entry in fields(features):
            if entry_number != 1:
                continue
            entry_key, feature = b"", b""
            for part, _, value in fields(entry):
                if part == 1:
                    entry_key = bytes(value)
                elif part == 2:
                    feature = value
            if entry_key != key:
                continue
            for kind, _, bytes_list in fields(feature):
                if kind == 1:
                    return [bytes(v) for n, _, v in fields(bytes_list) if n == 1]
            raise WireError(f"feature {name!r} is not a bytes feature")
    raise WireError(f"the record has no feature {name!r}")
