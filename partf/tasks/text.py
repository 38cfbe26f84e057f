"""Language modelling on records: text -> SentencePiece tokenizer -> context-batched
TFRecords (partf.data), scored by perplexity. partf-build-data's default task, with the
original project's flags; a plan names it `text` (its records or text in `[data]`)."""

from __future__ import annotations

import argparse
import urllib.parse
from pathlib import Path

from partf.errors import UsageError
from partf.tasks.base import Task

#: --text_file's default, where --source puts WikiText-2.
TEXT_FILE = "data/wikitext-2"


class _RecordsTask(Task):
    def add_build_flags(self, parser: argparse.ArgumentParser) -> None:
        from partf.cli.flags import add_bool_flag

        group = parser.add_argument_group(f"--task={self.name}: {self.help}")
        add_bool_flag(
            group,
            "from_directory",
            "Build train, valid and test records from the folder --text_file holding "
            "train.txt, valid.txt and test.txt (implied when --text_file is a folder).",
            False,
        )
        add_bool_flag(
            group,
            "train_tokenizer",
            "Train a SentencePiece tokenizer (on the train split only) and write "
            "<sp_model_prefix>.model; otherwise use the existing one.",
            False,
        )
        group.add_argument(
            "--text_file",
            help=f"A text file, or a folder with train.txt, valid.txt and test.txt "
            f"(default: {TEXT_FILE}).",
        )
        group.add_argument(
            "--sp_model_prefix",
            default="data/tokenizer/wiki2_12k",
            help="Tokenizer path without .model: trained into, or read from, <prefix>.model.",
        )
        add_bool_flag(
            group,
            "lowercase",
            "Lowercase (nfkc_cf) in a newly trained tokenizer; --nolowercase keeps case.",
            True,
        )
        group.add_argument(
            "--shards",
            type=int,
            default=1,
            help="Record files per folder; shard k holds a consecutive range of batches.",
        )
        add_bool_flag(
            group,
            "mask_symbol",
            "With --train_tokenizer: also reserve a [MASK] symbol (id 5), for partf-train "
            "--objective=mlm. Off keeps the original project's ids.",
            False,
        )
        group.add_argument(
            "--source",
            help="Where to get the text first: 'wikitext-2' (the copy partf ships, unpacked; "
            "downloaded, with mirrors, where partf has none; checksums verified), a URL or "
            "local path of a WikiText-2 zip (or of a folder URL ending in /), a folder with "
            "the three files, or one text file of your own (split by lines into "
            "train/valid/test, see --holdout_fraction). The files go into --text_file "
            f"(default {TEXT_FILE}, or data/<name> for your own file).",
        )
        group.add_argument(
            "--train_split",
            default="train",
            choices=["train", "valid"],
            help="File that trains the tokenizer and fills the _train records; 'valid' is "
            "an offline stand-in where train.txt is absent.",
        )
        group.add_argument(
            "--holdout_fraction",
            type=float,
            default=0.05,
            help="With --source=<your text file>: fraction of its lines for each of valid "
            "and test.",
        )

    def check_build(self, args: argparse.Namespace) -> None:
        if args.shards < 1:
            raise UsageError(
                f"--shards must be a positive integer, got {args.shards}; e.g. --shards=32"
            )
        if args.vocab_size is not None and args.vocab_size < 5:
            raise UsageError(
                f"--vocab_size must be at least 5, got {args.vocab_size}; e.g. --vocab_size=12000"
            )
        if not 0.0 < args.holdout_fraction < 0.5:
            raise UsageError(f"--holdout_fraction must be in (0, 0.5), got {args.holdout_fraction}")

    def build(self, args: argparse.Namespace) -> None:
        _build(args)


TASK = _RecordsTask("text", "records from text, scored by perplexity (the original flags)")


def _is_url(text: str) -> bool:
    return urllib.parse.urlparse(text).scheme in ("http", "https", "file")


def _fetch_source(args: argparse.Namespace) -> Path:
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
        data.split_text_file(source, text_dir, args.holdout_fraction, overwrite=args.overwrite)
    else:
        raise UsageError(
            f"--source={source} is not 'wikitext-2', a URL, or an existing file or folder; "
            f"check the path"
        )
    return text_dir


def _build(args: argparse.Namespace) -> None:
    import logging

    from partf import data

    text_path = Path(args.text_file or TEXT_FILE)
    directory_mode = args.from_directory or args.source is not None or text_path.is_dir()
    default_prefix = f"data/wikitext2_bsz{args.batch_size}_seqlen{args.seq_len}_tfrecords"
    prefix = args.tfrecords_directory or default_prefix
    splits = data.SPLITS if directory_mode else ("records",)
    records_dirs = {
        split: Path(f"{prefix}_{split}" if directory_mode else prefix) for split in splits
    }
    sp_model = data.model_path(args.sp_model_prefix)

    # Refuse early, before any download or training, when outputs are in the way.
    staged = data.StagedOutputs(args.overwrite)
    for out in records_dirs.values():
        staged.check(out)
    if args.train_tokenizer:
        staged.check(sp_model)
    elif not sp_model.is_file():
        data.load_sentencepiece(sp_model)  # the one-line "train one" message

    if args.source is not None:
        text_path = _fetch_source(args)
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
        vocab_size=12000 if args.vocab_size is None else args.vocab_size,
        lowercase=args.lowercase,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        shards=args.shards,
        overwrite=args.overwrite,
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
