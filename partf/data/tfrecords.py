"""Writing and reading context batches as TFRecords.

Each record is a `tf.train.Example` with one bytes feature `batch` holding
`tf.io.serialize_tensor` of one int32 batch [B, L + 1], as the original project's, so
either reads the other's records. partf's `metadata.json` lists the shards in stream
order and the reader reads them one after the other, never interleaved, so row r of
every batch continues row r of the batch before it across shards too.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from partf.console import Meter
from partf.data.batching import stream_from_batches
from partf.data.metadata import RecordsMetadata, write_metadata

# The feature's name, the folder helpers and the metadata are shared with the reader that
# needs no TensorFlow; an original-format folder's metadata is inferred there from its records.
from partf.data.record_reader import FEATURE
from partf.data.record_reader import check_fit as _check
from partf.data.record_reader import read_records_metadata as read_metadata
from partf.data.record_reader import record_files as _record_files
from partf.data.staging import StagedOutputs
from partf.errors import DataError, UsageError

logger = logging.getLogger(__name__)

_FEATURES = {FEATURE: tf.io.FixedLenFeature([], tf.string)}


def serialize_batch(batch: np.ndarray) -> bytes:
    """One batch [B, L + 1] as a serialized tf.train.Example (the record format)."""
    tensor = tf.make_tensor_proto(np.ascontiguousarray(batch, dtype=np.int32))
    feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[tensor.SerializeToString()]))
    example = tf.train.Example(features=tf.train.Features(feature={FEATURE: feature}))
    return example.SerializeToString()


def parse_batch(record: tf.Tensor) -> tf.Tensor:
    """Graph op: a serialized record -> int32 [B, L + 1] (shape not yet static)."""
    serialized = tf.io.parse_single_example(record, _FEATURES)[FEATURE]
    return tf.io.parse_tensor(serialized, out_type=tf.int32)


def write_shards(
    batches: np.ndarray, directory: str | os.PathLike, shards: int = 1, **metadata
) -> RecordsMetadata:
    """Writes [n, B, L + 1] int32 batches and metadata.json into an existing empty folder
    (not atomic: most callers want `write_tfrecords`), shard k the k-th of `shards`
    consecutive, near-equal ranges of batches; `metadata` holds further
    `RecordsMetadata` fields. Returns the metadata written."""
    if batches.ndim != 3:
        raise UsageError(f"batches must have shape [n, B, L + 1], got {batches.shape}")
    num_batches, batch_size, width = batches.shape
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise UsageError(f"--shards must be a positive integer, got {shards!r}")
    if shards > num_batches:
        raise DataError(
            f"--shards={shards} is more than the {num_batches} batches the text gives; "
            f"pass --shards={num_batches} or fewer"
        )
    directory = Path(directory)
    bounds = np.linspace(0, num_batches, shards + 1).round().astype(int)
    names, counts = [], []
    start = time.monotonic()
    # Batches written with a rate and an ETA, on stderr, when it takes a while.
    meter = Meter("writing records", num_batches, "batches", batch_size * (width - 1))
    for k in range(shards):
        names.append(f"shard-{k + 1:05d}-of-{shards:05d}.tfrecords")
        counts.append(int(bounds[k + 1] - bounds[k]))
        with tf.io.TFRecordWriter(str(directory / names[-1])) as writer:
            for i in range(bounds[k], bounds[k + 1]):
                writer.write(serialize_batch(batches[i]))
                meter.advance(i + 1)
    meta = RecordsMetadata(
        batch_size=int(batch_size),
        seq_len=int(width) - 1,
        num_batches=int(num_batches),
        shards=tuple(names),
        shard_batches=tuple(counts),
        **metadata,
    )
    write_metadata(directory, meta)
    logger.debug("wrote %d batches in %.2f s", num_batches, time.monotonic() - start)
    return meta


def write_tfrecords(
    batches: np.ndarray,
    directory: str | os.PathLike,
    shards: int = 1,
    overwrite: bool = False,
    **metadata,
) -> RecordsMetadata:
    """Writes a record folder all at once: staged beside `directory`, then renamed.
    `batches` are [n, B, L + 1] int32 (`context_batches`); each of `shards` files holds
    a consecutive range; `metadata` holds further `RecordsMetadata` fields. Returns the
    metadata written.

    Example:
        >>> batches = context_batches(np.arange(1000, dtype=np.int32), 4, 8)
        >>> write_tfrecords(batches, "/tmp/records", shards=2).num_batches
        31"""
    with StagedOutputs(overwrite) as staged:
        return write_shards(batches, staged.dir_for(directory), shards, **metadata)


def load_batches(
    path: str | os.PathLike,
    sp_model: str | os.PathLike | None = None,
    batch_size: int | None = None,
    seq_len: int | None = None,
) -> tf.data.Dataset:
    """Raw context batches int32 [B, L + 1], in stream order (see `load_tfrecords`)."""
    path = Path(path)
    meta = read_metadata(path)
    _check(meta, path, sp_model, batch_size, seq_len)
    files = [str(f) for f in _record_files(path, meta)]
    shape = [meta.batch_size, meta.seq_len + 1]
    # Files are read one after the other (no interleave) so stream order holds.
    dataset = tf.data.TFRecordDataset(files, buffer_size=1 << 22)
    dataset = dataset.map(
        tf.autograph.experimental.do_not_convert(
            lambda record: tf.ensure_shape(parse_batch(record), shape)
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return dataset.apply(tf.data.experimental.assert_cardinality(meta.num_batches))


def verify_records(path: str | os.PathLike) -> int:
    """The number of batches of a record folder (or one original-format file), every
    record read once with CRCs checked: a corrupt shard would otherwise fail only when
    training reaches it, possibly hours in (about a second for WikiText-2's training
    split). DataError for a truncated or corrupt shard, or a count unlike its metadata's."""
    path = Path(path)
    meta = read_metadata(path)
    files = [str(f) for f in _record_files(path, meta)]
    count = 0
    try:
        for _ in tf.data.TFRecordDataset(files, buffer_size=1 << 22):
            count += 1
    except (tf.errors.DataLossError, tf.errors.OutOfRangeError) as e:
        found = re.search(r"(truncated|corrupted) record at \d+", e.message)
        detail = f" ({found.group(0)})" if found else ""
        raise DataError(
            f"records in {path} are truncated or corrupt{detail} after {count} good batches; "
            f"rebuild them with partf-build-data --overwrite"
        ) from None
    if meta.num_batches is not None and count != meta.num_batches:
        raise DataError(
            f"records in {path} hold {count} batches but their metadata says "
            f"{meta.num_batches}; rebuild them with partf-build-data --overwrite"
        )
    return count


def load_tfrecords(
    path: str | os.PathLike,
    sp_model: str | os.PathLike | None = None,
    *,
    batch_size: int | None = None,
    seq_len: int | None = None,
    prefetch: bool = True,
) -> tf.data.Dataset:
    """A record folder (partf's, checked against metadata.json, or the original project's)
    as a `tf.data.Dataset` of (inputs, targets) int32 [B, L], targets shifted by one, in
    stream order: row r of element i+1 continues row r of element i. `sp_model`,
    `batch_size` and `seq_len`, when given, must match the records (DataError).

    Example:
        >>> ds = load_tfrecords("data/wikitext2_bsz32_seqlen32_tfrecords_valid",
        ...                     sp_model="data/tokenizer/wiki2_12k.model")"""
    dataset = load_batches(path, sp_model, batch_size, seq_len).map(
        tf.autograph.experimental.do_not_convert(lambda batch: (batch[:, :-1], batch[:, 1:])),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return dataset.prefetch(tf.data.AUTOTUNE) if prefetch else dataset


def read_batches(path: str | os.PathLike) -> np.ndarray:
    """All batches of a record folder as one numpy array [n, B, L + 1]."""
    meta = read_metadata(path)
    chunks = list(load_batches(path).batch(1024).as_numpy_iterator())
    if not chunks:
        return np.zeros([0, meta.batch_size, meta.seq_len + 1], np.int32)
    return np.concatenate(chunks)


def records_token_stream(path: str | os.PathLike) -> np.ndarray:
    """The token stream a partf record folder covers, [B*n*L + 1] ids in order (undoing
    `stream_from_batches`): the first B*n*L + 1 tokens of the tokenized text. UsageError
    for the original project's format, whose rows do not determine one stream."""
    meta = read_metadata(path)
    if meta.overlap != 1:
        raise UsageError(
            f"{path} holds original-format records; only partf records can be turned back "
            f"into one token stream"
        )
    return stream_from_batches(read_batches(path))
