"""Text -> tokens -> context batches -> record folders, in bounded memory.

Each text file is checked and counted (`text_stats`), tokenized inside
tf.data into a temporary memory-mapped token file (`tokenize_file`), viewed
as context batches without copying (`context_batches`) and written as shards
(`write_shards`). Outputs are staged next to their targets and renamed at the
end (`StagedOutputs`), so a failure leaves nothing half written.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from partf.data.batching import check_batch_shape, context_batches, num_lost_tokens
from partf.data.metadata import RecordsMetadata
from partf.data.staging import StagedOutputs
from partf.data.text_stats import TextStats, file_sha256, text_stats
from partf.data.tfrecords import write_shards
from partf.data.tokenizer import (
    DEFAULT_VOCAB_SIZE,
    MASK_PIECE,
    load_sentencepiece,
    mask_id_of,
    model_path,
    read_token_file,
    tokenize_file,
    train_tokenizer,
)
from partf.errors import DataError, UsageError

logger = logging.getLogger(__name__)


def _check_shards(shards: int) -> None:
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise UsageError(f"--shards must be a positive integer, got {shards!r}; e.g. --shards=1")


def _build_into(
    directory: Path,
    text_file: Path,
    sp_model: Path,
    batch_size: int,
    seq_len: int,
    shards: int,
    stats: TextStats | None = None,
    tokenizer_name: str | None = None,
) -> RecordsMetadata:
    """Builds the records of one text file into an existing empty folder."""
    start = time.perf_counter()
    stats = stats or text_stats(text_file)
    vocab_size = load_sentencepiece(sp_model).get_piece_size()
    token_file = directory / ".tokens.int32"
    try:
        num_tokens = tokenize_file(text_file, sp_model, token_file, total_lines=stats.num_lines)
        tokens = read_token_file(token_file)
        try:
            batches = context_batches(tokens, batch_size, seq_len)
        except DataError as e:
            raise DataError(f"{text_file}: {e}") from None
        meta = write_shards(
            batches,
            directory,
            shards,
            num_tokens=num_tokens,
            vocab_size=vocab_size,
            tokenizer_sha256=file_sha256(sp_model),
            source_sha256=stats.sha256,
            num_lines=stats.num_lines,
            num_words=stats.num_words,
            num_chars=stats.num_chars,
            num_bytes=stats.num_bytes,
            eos_per_line=True,
            source_file=text_file.name,
            tokenizer_file=tokenizer_name or sp_model.name,
            mask_id=mask_id_of(sp_model),
        )
        del batches, tokens  # release the memory map before deleting its file
    finally:
        token_file.unlink(missing_ok=True)
    logger.info(
        "%s: %d lines -> %d tokens -> %d batches of [%d, %d] in %d shard(s); last %d tokens "
        "dropped (less than a batch); %.2f s",
        text_file,
        stats.num_lines,
        num_tokens,
        meta.num_batches,
        batch_size,
        seq_len + 1,
        shards,
        num_lost_tokens(num_tokens, batch_size, seq_len),
        time.perf_counter() - start,
    )
    return meta


def build_records(
    text_file: str | os.PathLike,
    sp_model: str | os.PathLike,
    out_dir: str | os.PathLike,
    batch_size: int = 32,
    seq_len: int = 32,
    shards: int = 1,
    overwrite: bool = False,
) -> RecordsMetadata:
    """Builds one record folder `out_dir` (staged, then renamed) from one UTF-8 text file
    with an existing tokenizer, each of `shards` files a consecutive range of int32
    [B, L + 1] batches; returns the metadata written beside them.

    Raises:
        UsageError: bad sizes, missing inputs, `out_dir` in the way.
        DataError: empty or non-UTF-8 text, text shorter than one batch."""
    check_batch_shape(batch_size, seq_len)
    _check_shards(shards)
    text_file, sp_model = Path(text_file), Path(sp_model)
    with StagedOutputs(overwrite) as staged:
        return _build_into(
            staged.dir_for(out_dir), text_file, sp_model, batch_size, seq_len, shards
        )


def build_data(
    text_files: Mapping[str, str | os.PathLike],
    records_dirs: Mapping[str, str | os.PathLike],
    sp_model_prefix: str | os.PathLike,
    *,
    train_tokenizer_on: str | os.PathLike | None = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    lowercase: bool = True,
    batch_size: int = 32,
    seq_len: int = 32,
    shards: int = 1,
    overwrite: bool = False,
    mask_symbol: bool = False,
) -> dict[str, RecordsMetadata]:
    """Builds several record folders (name -> text file, name -> folder), all or nothing:
    every text is checked before any work starts, and the tokenizer (when trained on
    `train_tokenizer_on`, the train split; else `<sp_model_prefix>.model` is read) and
    all folders appear together at the end, or not at all. `vocab_size`, `lowercase` and
    `mask_symbol` shape a newly trained tokenizer (an existing one must already have
    `[MASK]` when asked for); `overwrite` replaces outputs. Returns name -> metadata.
    Raises as `build_records` and `train_tokenizer`."""
    check_batch_shape(batch_size, seq_len)
    _check_shards(shards)
    if set(text_files) != set(records_dirs):
        raise UsageError("text_files and records_dirs must name the same splits")
    final_model = model_path(sp_model_prefix)
    with StagedOutputs(overwrite) as staged:
        for out in records_dirs.values():
            staged.check(out)
        if train_tokenizer_on is not None:
            staged.check(final_model)
        elif not final_model.is_file():
            load_sentencepiece(final_model)  # raises the one-line "train one" message
        if mask_symbol and train_tokenizer_on is None and mask_id_of(final_model) is None:
            raise UsageError(
                f"tokenizer {final_model} has no {MASK_PIECE} symbol; add --train_tokenizer "
                "to train one with it (--mask_symbol), or drop --mask_symbol"
            )
        stats = {name: text_stats(path) for name, path in text_files.items()}

        sp_model = final_model
        if train_tokenizer_on is not None:
            sp_model = staged.file_for(final_model)
            staged_vocab = staged.file_for(final_model.with_suffix(".vocab"))
            train_tokenizer(
                train_tokenizer_on,
                sp_model,
                vocab_size,
                lowercase,
                overwrite=True,
                mask_symbol=mask_symbol,
            )
            os.replace(sp_model.with_suffix(".vocab"), staged_vocab)
        results = {}
        for name, text in text_files.items():
            logger.info("building %s records from %s", name, text)
            results[name] = _build_into(
                staged.dir_for(records_dirs[name]),
                Path(text),
                sp_model,
                batch_size,
                seq_len,
                shards,
                stats=stats[name],
                tokenizer_name=final_model.name,
            )
    return results
