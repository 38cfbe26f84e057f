"""partf-build-data: text -> SentencePiece tokenizer -> context-batched TFRecords.

Accepts the original project's build_data.py flags. Typical uses:

    # WikiText-2 (partf's copy, or downloaded where it has none), checked, then records:
    partf-build-data --source=wikitext-2 --train_tokenizer
    # a folder with train.txt, valid.txt, test.txt:
    partf-build-data --text_file=path/to/folder --from_directory --train_tokenizer
    # one file into one record folder, with an existing tokenizer:
    partf-build-data --text_file=notes.txt --tfrecords_directory=data/notes_tfrecords \
        --sp_model_prefix=data/tokenizer/wiki2_12k

Outputs: `<sp_model_prefix>.model/.vocab` when training a tokenizer, and
`<tfrecords_directory>_{train,valid,test}/` for a folder (or
`<tfrecords_directory>/` for one file), each with shards and metadata.json.

Never prompts: outputs that exist need --overwrite. Errors print one line; the
exit status is 2 for a bad command line (bad values, missing paths, outputs in
the way) and 1 for problems found while working (empty or non-UTF-8 text,
too little text, no network). --verbose adds the traceback.
"""

from __future__ import annotations

import logging
import sys
import urllib.parse
from pathlib import Path

from absl import flags

from partf.cli import exits

PROG = "partf-build-data"
logger = logging.getLogger("partf.cli.build_data")


def _define_flags() -> flags.FlagValues:
    # A private FlagValues, so other partf tools may define flags of the same
    # names in the same process (tests import them all).
    fv = flags.FlagValues()
    flags.DEFINE_boolean(
        "from_directory",
        False,
        "Build train, valid and test records from the folder --text_file holding train.txt, "
        "valid.txt and test.txt (implied when --text_file is a folder).",
        flag_values=fv,
    )
    flags.DEFINE_boolean(
        "train_tokenizer",
        False,
        "Train a SentencePiece tokenizer (on the train split only) and write "
        "<sp_model_prefix>.model; otherwise use the existing one.",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "text_file",
        "data/wikitext-2",
        "A text file, or a folder with train.txt, valid.txt and test.txt.",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "vocab_size", 12000, "Pieces in a newly trained tokenizer.", flag_values=fv
    )
    flags.DEFINE_string(
        "sp_model_prefix",
        "data/tokenizer/wiki2_12k",
        "Tokenizer path without .model: trained into, or read from, <prefix>.model.",
        flag_values=fv,
    )
    flags.DEFINE_boolean(
        "lowercase",
        True,
        "Lowercase (nfkc_cf) in a newly trained tokenizer; --nolowercase keeps case.",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "shards",
        1,
        "Record files per folder; shard k holds a consecutive range of batches.",
        flag_values=fv,
    )
    flags.DEFINE_integer("batch_size", 32, "Rows per batch (parallel streams).", flag_values=fv)
    flags.DEFINE_integer(
        "seq_len", 32, "Tokens per row per batch (each record holds seq_len + 1).", flag_values=fv
    )
    flags.DEFINE_string(
        "tfrecords_directory",
        None,
        "Record folder for one file, or prefix of the _train/_valid/_test folders. "
        "Default: data/wikitext2_bsz<batch_size>_seqlen<seq_len>_tfrecords.",
        flag_values=fv,
    )
    flags.DEFINE_boolean("overwrite", False, "Replace outputs that exist.", flag_values=fv)
    flags.DEFINE_boolean(
        "mask_symbol",
        False,
        "With --train_tokenizer: also reserve a [MASK] symbol (id 5), for partf-train "
        "--objective=mlm. Off keeps the original project's ids.",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "source",
        None,
        "Where to get the text first: 'wikitext-2' (the copy partf ships, unpacked; "
        "downloaded, with mirrors, where partf has none; checksums verified), a URL or "
        "local path of a WikiText-2 zip (or of a folder URL ending in /), "
        "a folder with the three files, or one text file of your own (split by lines into "
        "train/valid/test, see --holdout_fraction). The files go into --text_file "
        "(default data/wikitext-2, or data/<name> for your own file).",
        flag_values=fv,
    )
    flags.DEFINE_enum(
        "train_split",
        "train",
        ["train", "valid"],
        "File that trains the tokenizer and fills the _train records; 'valid' is an offline "
        "stand-in where train.txt is absent.",
        flag_values=fv,
    )
    flags.DEFINE_float(
        "holdout_fraction",
        0.05,
        "With --source=<your text file>: fraction of its lines for each of valid and test.",
        flag_values=fv,
    )
    flags.DEFINE_boolean(
        "verbose", False, "Debug logging, and tracebacks on errors.", flag_values=fv
    )
    flags.DEFINE_enum(
        "task",
        "text",
        ["text", "mqar"],
        "text: records from text (the flags above); mqar: multi-query associative recall "
        "splits (partf.data.mqar) of --seq_len tokens a row, --batch_size rows a batch, "
        "--vocab_size tokens (default 512 here), written to <--tfrecords_directory>_train, "
        "_valid and _test (default data/mqar_L<seq_len>_p<pairs>).",
        flag_values=fv,
    )
    flags.DEFINE_string(
        "mqar_pairs",
        "16",
        "--task=mqar: key-value pairs per training example; several, comma-separated "
        "(4,8,16): the examples cycle through them.",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "mqar_eval_pairs",
        None,
        "--task=mqar: pairs of each valid and test example (default: the largest of --mqar_pairs).",
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "mqar_train_examples", 20000, "--task=mqar: training examples.", flag_values=fv
    )
    flags.DEFINE_integer(
        "mqar_eval_examples", 1000, "--task=mqar: examples of valid and of test.", flag_values=fv
    )
    flags.DEFINE_integer("mqar_seed", 0, "--task=mqar: the seed of every split.", flag_values=fv)
    return fv


class _Usage(Exception):
    """A command-line problem found before any partf.data import (exit 2)."""


def _check_values(fv: flags.FlagValues) -> None:
    for name in ("batch_size", "seq_len", "shards"):
        if fv[name].value < 1:
            raise _Usage(
                f"--{name} must be a positive integer, got {fv[name].value}; e.g. --{name}=32"
            )
    if fv.vocab_size < 5:
        raise _Usage(
            f"--vocab_size must be at least 5, got {fv.vocab_size}; e.g. --vocab_size=12000"
        )
    if not 0.0 < fv.holdout_fraction < 0.5:
        raise _Usage(f"--holdout_fraction must be in (0, 0.5), got {fv.holdout_fraction}")


def _is_url(text: str) -> bool:
    return urllib.parse.urlparse(text).scheme in ("http", "https", "file")


def _fetch_source(fv: flags.FlagValues) -> Path:
    """Brings --source into a text folder; returns that folder."""
    from partf import data

    source = fv.source
    text_dir = Path(fv.text_file)
    if source == "wikitext-2":
        data.get_wikitext2(text_dir)
    elif _is_url(source) or source.endswith(".zip"):
        data.fetch_wikitext2(text_dir, sources=[source])
    elif Path(source).is_dir():
        text_dir = Path(source)
    elif Path(source).is_file():
        if not fv["text_file"].present:
            text_dir = Path("data") / Path(source).stem
        data.split_text_file(source, text_dir, fv.holdout_fraction, overwrite=fv.overwrite)
    else:
        raise data.UsageError(
            f"--source={source} is not 'wikitext-2', a URL, or an existing file or folder; "
            f"check the path"
        )
    return text_dir


def _main_mqar(fv: flags.FlagValues) -> None:
    from partf.data.mqar import MQARSettings, parse_pairs, write_mqar

    pairs = parse_pairs(fv.mqar_pairs)
    settings = MQARSettings(
        seq_len=fv.seq_len,
        pairs=pairs,
        vocab_size=fv.vocab_size if fv["vocab_size"].present else 512,
        batch_size=fv.batch_size,
        train_examples=fv.mqar_train_examples,
        eval_examples=fv.mqar_eval_examples,
        eval_pairs=fv.mqar_eval_pairs,
        seed=fv.mqar_seed,
    )
    prefix = fv.tfrecords_directory or f"data/mqar_L{fv.seq_len}_p{max(pairs)}"
    for split, folder in write_mqar(prefix, settings, fv.overwrite).items():
        logger.info(
            "%s: %d batches of [%d, %d], %d pairs an example",
            folder,
            settings.num_batches(split),
            settings.batch_size,
            settings.seq_len,
            max(settings.split_pairs(split)),
        )


def _main(fv: flags.FlagValues) -> None:
    from partf import data

    if fv.task == "mqar":
        _main_mqar(fv)
        return

    text_path = Path(fv.text_file)
    directory_mode = fv.from_directory or fv.source is not None or text_path.is_dir()
    default_prefix = f"data/wikitext2_bsz{fv.batch_size}_seqlen{fv.seq_len}_tfrecords"
    prefix = fv.tfrecords_directory or default_prefix
    splits = data.SPLITS if directory_mode else ("records",)
    records_dirs = {
        split: Path(f"{prefix}_{split}" if directory_mode else prefix) for split in splits
    }
    sp_model = data.model_path(fv.sp_model_prefix)

    # Refuse early, before any download or training, when outputs are in the way.
    staged = data.StagedOutputs(fv.overwrite)
    for out in records_dirs.values():
        staged.check(out)
    if fv.train_tokenizer:
        staged.check(sp_model)
    elif not sp_model.is_file():
        data.load_sentencepiece(sp_model)  # the one-line "train one" message

    if fv.source is not None:
        text_path = _fetch_source(fv)
    if directory_mode:
        text_files = data.find_splits(text_path, fv.train_split)
    else:
        if not text_path.exists():
            raise data.UsageError(
                f"--text_file={text_path} does not exist; give a text file or a folder, or "
                f"--source=wikitext-2 to download WikiText-2"
            )
        text_files = {"records": text_path}
    results = data.build_data(
        text_files,
        records_dirs,
        fv.sp_model_prefix,
        train_tokenizer_on=text_files["train" if directory_mode else "records"]
        if fv.train_tokenizer
        else None,
        vocab_size=fv.vocab_size,
        lowercase=fv.lowercase,
        batch_size=fv.batch_size,
        seq_len=fv.seq_len,
        shards=fv.shards,
        overwrite=fv.overwrite,
        mask_symbol=fv.mask_symbol,
    )
    if fv.train_tokenizer:
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


def _os_error_message(error: OSError) -> str:
    from partf.errors import os_error_message

    return os_error_message(
        error,
        "while writing the outputs",
        "nothing was kept: free some space and run the same command again",
    )


def run(argv: list[str] | None = None) -> int:
    """Entry point of partf-build-data. Returns the exit status.

    Args:
        argv: arguments without the program name; default sys.argv[1:].
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    fv = _define_flags()
    if any(arg in ("-h", "--help", "-help", "--helpfull") for arg in argv):
        print(__doc__.strip() + "\n\nflags:\n" + fv.get_help(include_special_flags=False))
        return 0
    try:
        fv([PROG, *argv])
    except flags.Error as e:
        return exits.fail(PROG, f"{e}; see {PROG} --help", 2, None, False)

    def fail(message: str, status: int, error: BaseException | None = None) -> int:
        return exits.fail(PROG, message, status, error, fv.verbose)

    try:
        _check_values(fv)
    except _Usage as e:
        return fail(str(e), 2)

    exits.quiet_tensorflow(fv.verbose)
    from partf.errors import DataError, UsageError

    try:
        with exits.package_logging(fv.verbose):
            _main(fv)
    except UsageError as e:
        return fail(str(e), 2, e)
    except DataError as e:
        return fail(str(e), 1, e)
    except KeyboardInterrupt:
        return fail("interrupted; outputs were left as they were", 130)
    except OSError as e:  # a full disk, a folder that cannot be written
        return fail(_os_error_message(e), 1, e)
    except Exception as e:  # one line for anything unforeseen, the traceback on request
        return fail(exits.unexpected(e), 1, e)
    return 0


if __name__ == "__main__":
    sys.exit(run())
