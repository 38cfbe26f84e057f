"""Reading context-batch records into numpy, without TensorFlow (the JAX backend on a
machine without it): the same batches, in the same order, as `tfrecords.load_batches`,
from partf's folders (listed by metadata.json) or the original project's
(`file1.tfrecords`, ... in numeric order), every CRC checked. The folder helpers (which
files, in which order; whether records fit a tokenizer and batch shape) and the
metadata serve both readers.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from partf.data.metadata import METADATA_FILE, RecordsMetadata
from partf.data.text_stats import file_sha256
from partf.data.tfrecord_format import (
    DT_INT32,
    FrameError,
    WireError,
    decode_tensor,
    example_bytes_feature,
    read_frames,
)
from partf.errors import DataError, UsageError

logger = logging.getLogger(__name__)

#: The one feature of a record: `tf.io.serialize_tensor` of an int32 batch [B, L + 1].
FEATURE = "batch"


# ------------------------------------------------------------------ folders
def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def original_files(path: Path) -> list[Path]:
    """The `.tfrecords` files of an original-format folder, in numeric order (or `path`
    itself when it is a file)."""
    if path.is_file():
        return [path]
    files = sorted(path.glob("*.tfrecords"), key=_natural_key)
    if not files:
        raise UsageError(
            f"{path} holds no metadata.json and no .tfrecords files; build records with "
            f"partf-build-data"
        )
    return files


def record_files(path: Path, meta: RecordsMetadata) -> list[Path]:
    """The record files of a folder, in stream order; DataError for a shard that
    metadata.json lists but the folder lacks."""
    folder = path if path.is_dir() else path.parent
    if meta.format_version == 0:
        return original_files(path)
    files = [folder / name for name in meta.shards]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise DataError(
            f"record shards missing: {', '.join(missing)}; rebuild them with "
            f"partf-build-data --overwrite"
        )
    return files


def check_fit(
    meta: RecordsMetadata,
    path: Path,
    sp_model: str | os.PathLike | None,
    batch_size: int | None,
    seq_len: int | None,
) -> None:
    """Refuses records of another batch shape, or built with another tokenizer
    (DataError); UsageError when `sp_model` does not exist."""
    for name, want, have in (
        ("batch_size", batch_size, meta.batch_size),
        ("seq_len", seq_len, meta.seq_len),
    ):
        if want is not None and want != have:
            raise DataError(
                f"records in {path} have {name}={have}, not the {want} asked for; use "
                f"{name}={have}, or rebuild the records with --{name}={want}"
            )
    if sp_model is None:
        return
    if meta.tokenizer_sha256 is None:
        logger.warning(
            "records in %s name no tokenizer (original format); cannot check %s against them",
            path,
            sp_model,
        )
        return
    if not Path(sp_model).is_file():
        raise UsageError(f"tokenizer model {sp_model} does not exist; check the path")
    have = file_sha256(sp_model)
    if have != meta.tokenizer_sha256:
        raise DataError(
            f"tokenizer {sp_model} (sha256 {have[:12]}) is not the one the records in {path} "
            f"were built with (sha256 {meta.tokenizer_sha256[:12]}, {meta.tokenizer_file}); "
            f"use that tokenizer, or rebuild the records with this one"
        )


# ------------------------------------------------------------------ records
def _frames(path: Path) -> list[memoryview]:
    """The records of one `.tfrecords` file, CRCs checked; a file whose first record
    cannot be read is not taken for records at all."""
    try:
        return read_frames(path.read_bytes())
    except FrameError as e:
        if e.good == 0:
            raise _not_records(path, e.detail) from None
        raise DataError(
            f"records in {path} are truncated or corrupt ({e.detail}) after {e.good} good "
            "batches; rebuild them with partf-build-data --overwrite"
        ) from None


def _not_records(path: Path, detail: str) -> DataError:
    return DataError(
        f"{path} does not hold context-batch records ({detail}); build records with "
        "partf-build-data"
    )


def _batch(path: Path, payload: memoryview, index: int) -> np.ndarray:
    """Record `index` of `path` as an int32 batch [B, L + 1]."""
    try:
        (serialized,) = example_bytes_feature(payload, FEATURE)
        tensor = decode_tensor(serialized)
    except (WireError, ValueError) as e:
        raise _not_records(path, f"record {index}: {e}") from None
    if tensor.dtype != DT_INT32 or tensor.array.ndim != 2 or tensor.array.shape[1] < 2:
        raise DataError(
            f"records in {path} have shape {list(tensor.array.shape)}, not int32 "
            "[batch, seq_len + 1]; build records with partf-build-data"
        )
    return tensor.array


def read_record_file(path: Path) -> list[np.ndarray]:
    """Every batch of one `.tfrecords` file, as int32 arrays, CRCs checked; DataError for
    a truncated or corrupt file, or records that are not int32 context batches."""
    return [_batch(path, payload, i) for i, payload in enumerate(_frames(path))]


def read_records_metadata(path: str | os.PathLike) -> RecordsMetadata:
    """The metadata of a record folder (`partf.data.read_metadata`, without TensorFlow):
    metadata.json, or, for the original project's folders (or one .tfrecords file), the
    shape of the first record and the count of all of them, every CRC checked. UsageError
    when the path does not exist or holds no records, DataError when they cannot be read.
    """
    path = Path(path)
    meta = partf_metadata(path)
    if meta is not None:
        return meta
    # Only the first record is decoded: the others are counted, their CRCs checked.
    files = original_files(path)
    counts = [len(_frames(file)) for file in files]
    if not counts[0]:
        raise DataError(f"{files[0]} holds no records; rebuild it")
    return original_metadata(_batch(files[0], _frames(files[0])[0], 0).shape, files, counts)


def partf_metadata(path: Path) -> RecordsMetadata | None:
    """The metadata.json of a partf folder; None for the original project's format;
    UsageError when `path` does not exist."""
    if not path.exists():
        raise UsageError(
            f"records {path} do not exist; build them with partf-build-data "
            f"(or create_tfrecords.sh)"
        )
    meta_file = path / METADATA_FILE
    if path.is_dir() and meta_file.is_file():
        return RecordsMetadata.from_json(meta_file.read_text(encoding="utf-8"), str(meta_file))
    return None


def original_metadata(
    shape: Sequence[int], files: Sequence[Path], counts: Sequence[int]
) -> RecordsMetadata:
    """The metadata of an original-format folder, which has no metadata.json: batches of
    `shape` ([B, L + 1]) in `files`, holding `counts` records each."""
    return RecordsMetadata(
        batch_size=int(shape[0]),
        seq_len=int(shape[1]) - 1,
        num_batches=sum(counts),
        shards=tuple(f.name for f in files),
        shard_batches=tuple(counts),
        format_version=0,
        overlap=0,
        eos_per_line=False,
    )


def _read_original(path: Path) -> tuple[RecordsMetadata, list[np.ndarray]]:
    """An original-format folder (or file): its inferred metadata and its batches."""
    files = original_files(path)
    counts, batches = [], []
    for file in files:
        found = read_record_file(file)
        counts.append(len(found))
        batches.extend(found)
    if not batches:
        raise DataError(f"{files[0]} holds no records; rebuild it")
    return original_metadata(batches[0].shape, files, counts), batches


def read_record_batches(
    path: str | os.PathLike,
    sp_model: str | os.PathLike | None = None,
    batch_size: int | None = None,
    seq_len: int | None = None,
) -> np.ndarray:
    """int32 [n, B, L + 1]: all batches of a record folder (or one original-format file),
    in stream order, as `partf.data.load_batches` gives them, with every CRC and the
    count checked. `sp_model`, `batch_size` and `seq_len`, when given, must fit the
    records. DataError for damaged records, another shape or count than the metadata
    says, or a tokenizer or shape that does not fit; UsageError as `partf_metadata`."""
    path = Path(path)
    meta = partf_metadata(path)
    if meta is None:  # the original's format: its metadata comes from the records, read once
        meta, found = _read_original(path)
        check_fit(meta, path, sp_model, batch_size, seq_len)
        read = [(path, found)]
    else:
        check_fit(meta, path, sp_model, batch_size, seq_len)
        read = [(file, read_record_file(file)) for file in record_files(path, meta)]
    shape = (meta.batch_size, meta.seq_len + 1)
    batches: list[np.ndarray] = []
    for file, found in read:
        for batch in found:
            if batch.shape != shape:
                raise DataError(
                    f"a record of {file} has shape {list(batch.shape)}, not the "
                    f"{list(shape)} of the others; rebuild the records with "
                    "partf-build-data --overwrite"
                )
            batches.append(batch)
    if meta.num_batches is not None and len(batches) != meta.num_batches:
        raise DataError(
            f"records in {path} hold {len(batches)} batches but their metadata says "
            f"{meta.num_batches}; rebuild them with partf-build-data --overwrite"
        )
    if not batches:
        return np.zeros((0, *shape), np.int32)
    return np.stack(batches)
