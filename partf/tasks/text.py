"""Language modelling on records: text -> SentencePiece tokenizer -> context-batched
TFRecords (partf.data), scored by perplexity. partf-build-data's default task, with the
original project's flags; a plan names it `text` (its records or text in `[data]`)."""

from __future__ import annotations

import dataclasses
import logging
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from partf.errors import UsageError
from partf.settings import setting
from partf.tasks.base import Task

#: --text_file's default, where --source puts WikiText-2.
TEXT_FILE = "data/wikitext-2"


@dataclasses.dataclass(frozen=True)
class TextOptions:
    """partf-build-data's flags of text records (the original build_data.py's)."""

    from_directory: bool = setting(
        False,
        "Build train, valid and test records from the folder --text_file holding train.txt, "
        "valid.txt and test.txt (implied when --text_file is a folder).",
    )
    train_tokenizer: bool = setting(
        False,
        "Train a SentencePiece tokenizer (on the train split only) and write "
        "<sp_model_prefix>.model; otherwise use the existing one.",
    )
    text_file: str | None = setting(
        None,
        f"A text file, or a folder with train.txt, valid.txt and test.txt [{TEXT_FILE}].",
    )
    sp_model_prefix: str = setting(
        "data/tokenizer/wiki2_12k",
        "Tokenizer path without .model: trained into, or read from, <prefix>.model.",
    )
    lowercase: bool = setting(
        True, "Lowercase (nfkc_cf) in a newly trained tokenizer; --nolowercase keeps case."
    )
    shards: int = setting(
        1, "Record files per folder; shard k holds a consecutive range of batches."
    )
    mask_symbol: bool = setting(
        False,
        "With --train_tokenizer: also reserve a [MASK] symbol (id 5), for partf-train "
        "--objective=mlm. Off keeps the original project's ids.",
    )
    source: str | None = setting(
        None,
        "Where to get the text first: 'wikitext-2' (the copy partf ships, unpacked; "
        "downloaded, with mirrors, where partf has none; checksums verified), a URL or "
        "local path of a WikiText-2 zip (or of a folder URL ending in /), a folder with "
        "the three files, or one text file of your own (split by lines into "
        "train/valid/test, see --holdout_fraction). The files go into --text_file "
        f"(default {TEXT_FILE}, or data/<name> for your own file).",
    )
    train_split: str = setting(
        "train",
        "File that trains the tokenizer and fills the _train records; 'valid' is an "
        "offline stand-in where train.txt is absent.",
        choices=("train", "valid"),
    )
    holdout_fraction: float = setting(
        0.05, "With --source=<your text file>: fraction of its lines for each of valid and test."
    )
    vocab_size: int = 12000  # the shared flags of partf-build-data
    batch_size: int = 32
    seq_len: int = 32

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise UsageError(
                f"--shards must be a positive integer, got {self.shards}; e.g. --shards=32"
            )
        if self.vocab_size < 5:
            raise UsageError(
                f"--vocab_size must be at least 5, got {self.vocab_size}; e.g. --vocab_size=12000"
            )
        if not 0.0 < self.holdout_fraction < 0.5:
            raise UsageError(f"--holdout_fraction must be in (0, 0.5), got {self.holdout_fraction}")


def _is_url(text: str) -> bool:
    return urllib.parse.urlparse(text).scheme in ("http", "https", "file")


def _fetch_source(args: TextOptions, overwrite: bool) -> Path:
    """Brings --source into a text folder; returns that folder."""
    from partf import data

    source = args.source
    text_dir = Path(args.text_file or TEXT_FILE)
    if source == "wikitext-2":
        data.get_wikitext2(text_dir)
    elif _is_url(source) or source.endswith(".zip"):
        data.fetch_wikitext2(text_dir, sources=[source])
    elif Path(source).is_dir():
        text_dir = Path(source)
    elif Path(source).is_file():
        if args.text_file is None:
            text_dir = Path("data") / Path(source).stem
        data.split_text_file(source, text_dir, args.holdout_fraction, overwrite=overwrite)
    else:
        raise UsageError(
            f"--source={source} is not 'wikitext-2', a URL, or an existing file or folder; "
            f"check the path"
        )
    return text_dir


class _RecordsTask(Task):
    def build(self, values: Mapping[str, Any], prefix: str | None, overwrite: bool) -> None:
        from partf import data

        args = TextOptions(**values)
        text_path = Path(args.text_file or TEXT_FILE)
        directory_mode = args.from_directory or args.source is not None or text_path.is_dir()
        prefix = prefix or f"data/wikitext2_bsz{args.batch_size}_seqlen{args.seq_len}_tfrecords"
        splits = data.SPLITS if directory_mode else ("records",)
        records_dirs = {
            split: Path(f"{prefix}_{split}" if directory_mode else prefix) for split in splits
        }
        sp_model = data.model_path(args.sp_model_prefix)

        # Refuse early, before any download or training, when outputs are in the way.
        staged = data.StagedOutputs(overwrite)
        for out in records_dirs.values():
            staged.check(out)
        if args.train_tokenizer:
            staged.check(sp_model)
        elif not sp_model.is_file():
            data.load_sentencepiece(sp_model)  # the one-line "train one" message

        if args.source is not None:
            text_path = _fetch_source(args, overwrite)
        if directory_mode:
            text_files = data.find_splits(text_path, args.train_split)
        else:
            if not text_path.exists():
                raise UsageError(
                    f"--text_file={text_path} does not exist; give a text file or a folder, or "
                    f"--source=wikitext-2 to download WikiText-2"
                )
            text_files = {"records": text_path}
        results = data.build_data(
            text_files,
            records_dirs,
            args.sp_model_prefix,
            train_tokenizer_on=text_files["train" if directory_mode else "records"]
            if args.train_tokenizer
            else None,
            vocab_size=args.vocab_size,
            lowercase=args.lowercase,
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            shards=args.shards,
            overwrite=overwrite,
            mask_symbol=args.mask_symbol,
        )
        logger = logging.getLogger("partf.cli.build_data")
        if args.train_tokenizer:
            logger.info("tokenizer: %s", sp_model)
        for split, meta in results.items():
            logger.info(
                "%s: %d batches of [%d, %d] from %d tokens",
                records_dirs[split],
                meta.num_batches,
                meta.batch_size,
                meta.seq_len + 1,
                meta.num_tokens,
            )


TASK = _RecordsTask(
    "text", "records from text, scored by perplexity (the original flags)", TextOptions
)
