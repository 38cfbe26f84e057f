"""Finds optimal adaptive-softmax cutoffs from unigram frequencies.

Prints one line, the cutoffs as training flags (``--cutoffs=A --cutoffs=B``), on stdout;
the cost and details go to the log on stderr, so the output can be pasted or substituted:

    python scripts/optimal_cuts.py --filename=probs.txt --clusters=3
    python scripts/optimal_cuts.py --records=data/tfrecords_train --sp_model=wiki2_12k.model \\
        --clusters=3
    python scripts/optimal_cuts.py --text=train.txt --sp_model=wiki2_12k.model --clusters=2

Inputs (give exactly one):
  --filename  numbers separated by white space, one per line in the original project's
              files (counts or probabilities), or ``token count`` lines.
  --records   a folder of context-batch TFRecords, partf's or the original project's
              (or one original ``.tfrecords`` file), read with
              `partf.data.load_tfrecords`; the target ids are counted.
  --text      a text file, tokenized line by line with the SentencePiece model --sp_model.

The flags --filename, --clusters and --verbose are those of the original
optimal_cuts.py, and the search finds the same partition. The printed numbers differ: each
cutoff is the first position of a tail cluster (the head holds ``cutoffs[0]`` tokens) and
the vocabulary size is left out, which is what ``--cutoffs`` of training expects; the
original printed each boundary two lower and appended the vocabulary size. The search
itself lives in `cutoffs.py` beside this script.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from absl import app, flags, logging
from cutoffs import COSTS, optimal_cutoffs, partition_cost, read_frequencies

FLAGS = flags.FLAGS

flags.DEFINE_string(
    "filename", "", "File of counts or probabilities (space separated) or of 'token count' lines."
)
flags.DEFINE_integer("clusters", 1, "Number of clusters, the head included.", lower_bound=1)
flags.DEFINE_boolean("verbose", True, "Log details about the input and the search.")
flags.DEFINE_enum(
    "format",
    "auto",
    ["auto", "values", "pairs"],
    "Layout of --filename; auto reads two fields per line as 'token count', else values.",
)
flags.DEFINE_string("records", "", "Records folder (partf or original format); counts target ids.")
flags.DEFINE_string("text", "", "Text file to tokenize with --sp_model and count.")
flags.DEFINE_string("sp_model", "", "SentencePiece model: tokenizes --text, sizes the vocabulary.")
flags.DEFINE_integer(
    "vocab_size",
    0,
    "Vocabulary size for --records (default: from --sp_model, else the largest id + 1).",
    lower_bound=0,
)
flags.DEFINE_boolean(
    "sort",
    True,
    "Sort frequencies in decreasing order first, as the original does (cutoffs are then "
    "frequency ranks). --nosort keeps the id order, which the adaptive softmax uses as is.",
)
flags.DEFINE_enum(
    "cost",
    "original",
    list(COSTS),
    "original: every cluster costs size x probability mass (the original project). paper: "
    "the head is evaluated for every token and holds one column per tail cluster.",
)


def count_records(path: Path, sp_model: str) -> np.ndarray:
    """Counts the target ids of context-batch records, in partf's or the original's format.

    Targets are the positions where the softmax runs, so their frequencies are the ones the
    cutoffs trade off. Every token of a partf stream is a target once (rows overlap by one
    token); in the original's records the first token of each row is never a target.
    """
    import tensorflow as tf  # slow to import, and only this input needs it

    from partf.data import load_tfrecords

    targets = load_tfrecords(path, sp_model or None).map(
        lambda _, target: tf.reshape(target, [-1]), num_parallel_calls=tf.data.AUTOTUNE
    )
    counts = np.zeros(0, dtype=np.int64)
    for ids in targets.batch(256).as_numpy_iterator():
        ids = ids.ravel()
        if ids.size and ids.min() < 0:
            raise ValueError(f"negative token id {ids.min()} in {path}; the records are corrupt")
        batch = np.bincount(ids, minlength=counts.size)
        batch[: counts.size] += counts
        counts = batch
    if counts.sum() == 0:
        raise ValueError(f"records in {path} hold no tokens; build them from non-empty text")
    return counts


def _sentencepiece(model: str):
    import sentencepiece

    if not Path(model).is_file():
        raise FileNotFoundError(f"SentencePiece model {model} does not exist; check --sp_model")
    return sentencepiece.SentencePieceProcessor(model_file=model)


def count_text(text: Path, model: str) -> np.ndarray:
    """Tokenizes a text file line by line, as the original data builder does, and counts ids."""
    if not text.is_file():
        raise FileNotFoundError(f"text file {text} does not exist; check --text")
    processor = _sentencepiece(model)
    lines = text.read_text(encoding="utf-8").splitlines()
    ids = [np.asarray(piece_ids, dtype=np.int64) for piece_ids in processor.encode(lines)]
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    return np.bincount(flat, minlength=processor.get_piece_size())


def _fit_vocabulary(counts: np.ndarray, vocab_size: int, source: str) -> np.ndarray:
    if vocab_size == 0:
        logging.warning(
            "vocabulary size taken as the largest id + 1 = %d; pass --sp_model or --vocab_size "
            "so that unseen tokens are counted too",
            counts.size,
        )
        return counts
    if counts.size > vocab_size:
        raise ValueError(
            f"{source} holds token id {counts.size - 1} but the vocabulary has {vocab_size} "
            "tokens; fix --vocab_size or --sp_model"
        )
    return np.pad(counts, (0, vocab_size - counts.size))


def load_frequencies() -> tuple[np.ndarray, bool, str]:
    """Reads the input named by the flags: (frequencies, whether positions are ids, source)."""
    given = [name for name in ("filename", "records", "text") if getattr(FLAGS, name)]
    if len(given) != 1:
        raise ValueError(
            "give exactly one of --filename, --records or --text"
            + (f" (got {', '.join('--' + g for g in given)})" if given else "")
        )
    if FLAGS.filename:
        freqs, tokens = read_frequencies(FLAGS.filename, fmt=FLAGS.format)
        return freqs, tokens is not None, FLAGS.filename
    if FLAGS.records:
        counts = count_records(Path(FLAGS.records), FLAGS.sp_model)
        vocab_size = FLAGS.vocab_size
        if not vocab_size and FLAGS.sp_model:
            vocab_size = _sentencepiece(FLAGS.sp_model).get_piece_size()
        return _fit_vocabulary(counts, vocab_size, FLAGS.records), True, FLAGS.records
    if not FLAGS.sp_model:
        raise ValueError("--text needs --sp_model to tokenize it; pass the SentencePiece model")
    counts = count_text(Path(FLAGS.text), FLAGS.sp_model)
    if FLAGS.vocab_size:
        counts = _fit_vocabulary(counts, FLAGS.vocab_size, FLAGS.text)
    return counts, True, FLAGS.text


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"optimal_cuts.py: error: unexpected arguments {argv[1:]}; use --flag=value")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.INFO)  # the cost is reported in the log
    try:
        freqs, has_ids, source = load_frequencies()
        start = time.perf_counter()
        result = optimal_cutoffs(freqs, FLAGS.clusters, sort=FLAGS.sort, cost=FLAGS.cost)
        elapsed = time.perf_counter() - start
    except (ValueError, FileNotFoundError) as error:
        sys.exit(f"optimal_cuts.py: error: {error}")

    if FLAGS.verbose:
        logging.info(
            "%s: vocabulary of %d, %d with non-zero frequency, total mass %.6g",
            source,
            freqs.size,
            int(np.count_nonzero(freqs)),
            freqs.sum(),
        )
        logging.info("search took %.3f s", elapsed)
    positions = "frequency ranks" if result.sorted else "positions in input order"
    logging.info(
        "%d cluster(s) over %d tokens: cutoffs %s (%s), cost %.2f columns per token "
        "(full softmax %d, %.1fx less), cost model %r",
        FLAGS.clusters,
        result.vocab_size,
        list(result.cutoffs),
        positions,
        result.cost,
        result.vocab_size,
        result.vocab_size / result.cost,
        result.cost_name,
    )
    if has_ids and result.sorted and result.cutoffs:
        # The adaptive softmax cuts token ids, not ranks: show what these cutoffs cost there.
        as_ids = partition_cost(freqs, result.cutoffs, cost=result.cost_name)
        if not np.isclose(as_ids, result.cost):
            logging.info(
                "applied to token ids in their own order these cutoffs cost %.2f, since ids "
                "are not sorted by frequency; --nosort optimises for the id order",
                as_ids,
            )
    print(result.flags())


if __name__ == "__main__":
    app.run(main)
