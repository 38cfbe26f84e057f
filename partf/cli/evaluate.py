"""partf-evaluate: score a saved PAR Transformer-XL on records, a task's split or a text file.

The split is read in stream order with the model's evaluation memory starting empty,
as partf-train scores its splits (the same evaluator), and the figures are printed:
exact token perplexity, the original project's figure (the mean of exp(batch loss)),
word-level perplexity (words plus line ends of the raw text) and bits per character.

Examples:
    partf-evaluate --model checkpoints/base --records data/wikitext2_bsz32_seqlen32_tfrecords_test
    partf-evaluate --model checkpoints/base/base.keras --text data/wikitext-2/test.txt --json
    partf-evaluate --model checkpoints/base --records DIR --eval_mode expected
    partf-evaluate --model checkpoints/mqar --records data/mqar_test --by_distance

--model takes a `.keras` file or a run's checkpoint folder (its <model_name>.keras, or
else its newest checkpoint rebuilt from config.json). --records is a folder written by
partf-build-data (or the original project); its batches must have the model's batch
size (the rows its memory holds). --text is tokenized with the run's tokenizer
(--sp_model, or the one config.json names), one end-of-line token per line as in
training, and cut into context batches of the model's batch size and --seq_len tokens.
Records of partf carry the word and character counts of their text; records of the
original project do not, so those two figures are then absent.

--records also takes the split of a synthetic task (a folder with <task>.json, written
by partf-build-data --task=<task>), scored on its answers alone: the figures then add
the accuracy, the share of answers predicted exactly. With an MQAR split, --by_distance
adds the answers, those right and the accuracy per range of distance between a key's
pair and its query (0-16, 16-32, ... tokens), and what the model answers: how many
distinct tokens, and how often a value of the row's own pairs (docs/generation.md).

Exit status: 0 done, 1 a problem found while running (unreadable model, records or
tokenizer that do not fit the model), 2 bad usage (bad values, missing files). Errors
print one line; --verbose adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from partf.cli.command import model_parser, run_command
from partf.cli.flags import add_bool_flag
from partf.cli.loading import RuntimeExit, UsageExit, find_sp_model, load_model, model_file

PROG = "partf-evaluate"
EVAL_MODES = ("argmax", "expected", "sample")
logger = logging.getLogger("partf.cli.evaluate")

#: The figures printed, in order, with their labels.
FIGURES = (
    ("perplexity", "perplexity (exact, per token)"),
    ("perplexity_original", "original's figure (mean of exp(batch loss))"),
    ("word_perplexity", "word perplexity (words + line ends)"),
    ("bits_per_character", "bits per character"),
    ("loss", "loss (nats per token)"),
    ("num_tokens", "target tokens"),
    ("num_batches", "batches"),
)


def build_parser() -> argparse.ArgumentParser:
    """The flags, `--name VALUE` and `--name=VALUE` alike."""
    parser = model_parser(PROG, __doc__)
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument(
        "--records",
        help="a folder of context-batched records, or a task's split (partf-build-data "
        "--task=mqar, ...), to score",
    )
    data.add_argument(
        "--text", help="a UTF-8 text file to score (tokenized with the run's tokenizer)"
    )
    parser.add_argument(
        "--sp_model",
        help="SentencePiece .model file (or prefix without .model); default: the run's tokenizer "
        "from config.json (needed for --text; checked against --records when found)",
    )
    parser.add_argument(
        "--seq_len", type=int, default=32, help="--text: tokens per row of each batch"
    )
    parser.add_argument(
        "--eval_mode",
        choices=EVAL_MODES,
        help="block weights of a searched model: argmax (the discrete architecture), "
        "expected (pi-weighted) or sample (Gumbel samples, the original's); default: the "
        "model's own",
    )
    add_bool_flag(
        parser,
        "by_distance",
        "an MQAR split: also the accuracy by distance between a key's pair and its query",
        default=False,
    )
    add_bool_flag(parser, "json", "print the figures as one JSON object", default=False)
    add_bool_flag(parser, "jit_compile", "score with XLA-compiled calls", default=True)
    add_bool_flag(parser, "verbose", "debug logs, and tracebacks on errors", default=False)
    return parser


def _parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.seq_len < 1:
        raise UsageExit(f"--seq_len must be >= 1, got {args.seq_len}; e.g. --seq_len 32")
    # Paths are checked before TensorFlow loads, so that a wrong one is answered at once.
    model_file(args.model)
    if args.records:
        _check_records_path(Path(args.records))
    if args.by_distance and not (args.records and _task_of(args.records)):
        what = f"--records {args.records} holds" if args.records else f"--text {args.text} is"
        raise UsageExit(
            f"--by_distance scores the answers of an MQAR split but {what} text; pass "
            "--records an MQAR split folder (partf-build-data --task=mqar), or drop "
            "--by_distance"
        )
    return args


def _check_records_path(path: Path) -> None:
    """Refuses a --records path that does not exist or holds no records, as
    `partf.data.read_metadata` would, without importing it."""
    if not path.exists():
        raise UsageExit(f"--records {path} does not exist; pass a folder of .tfrecords files")
    listed = (path / "metadata.json").is_file() or any(path.glob("*.tfrecords"))
    if path.is_dir() and not listed and not _task_of(path):
        raise UsageExit(
            f"{path} holds no metadata.json and no .tfrecords files; build records with "
            "partf-build-data (or a task's split with partf-build-data --task=<task>)"
        )


def _task_of(path: str | Path) -> Any:
    """The drawn task whose split `path` is (partf.tasks), or None."""
    from partf import tasks

    return tasks.of_folder(path)


# --------------------------------------------------------------------- splits
def _records_split(args: argparse.Namespace, model: Any, run_dir: Path) -> Any:
    """The `Split` of --records (records, or a task's split), checked against the model."""
    from partf.data import read_metadata
    from partf.errors import DataError, UsageError
    from partf.training.splits import load_split

    path = Path(args.records)  # checked by _parse
    task, sp_prefix = _task_of(path), None
    try:
        if task is None and read_metadata(path).tokenizer_sha256:
            try:
                sp_prefix = str(find_sp_model(args.sp_model, run_dir))
            except UsageExit:
                if args.sp_model:
                    raise
                logger.warning("no tokenizer found: the records are not checked against one")
        split = load_split(str(path), "scored", sp_prefix)
    except UsageError as e:  # includes ConfigError
        raise UsageExit(str(e)) from e
    except DataError as e:  # a tokenizer mismatch, damaged records or task split
        raise RuntimeExit(str(e)) from e
    rows, vocab = model.config.batch_size, model.config.vocab_size
    fix = (
        f"write the split with partf-build-data --task={task.name}"
        if task
        else "score records built with"
    )
    if split.batch_size != rows:
        raise RuntimeExit(
            f"{path} has batches of {split.batch_size} rows but the model's memory holds "
            f"{rows} (its batch_size); {fix} --batch_size={rows}"
            + ("" if task else ", or pass --text to batch a text file for the model")
        )
    # A task's tokens are ids of the model's vocabulary; records are of its tokenizer.
    if split.vocab_size and (split.vocab_size > vocab if task else split.vocab_size != vocab):
        raise RuntimeExit(
            f"{path} uses a vocabulary of {split.vocab_size} tokens but the model {vocab}; "
            + (f"{fix} --vocab_size <= {vocab}" if task else f"{fix} the model's tokenizer")
        )
    _check_positions(model, split.num_batches * split.seq_len)
    return split


def _text_split(args: argparse.Namespace, model: Any, run_dir: Path) -> tuple[Any, dict]:
    """(dataset, text counts) of --text: tokenized, then context-batched for the model."""
    import numpy as np
    import tensorflow as tf

    from partf.data import (
        context_batches,
        read_token_file,
        text_stats,
        tokenize_file,
        vocab_size_of,
    )
    from partf.errors import DataError, UsageError

    sp_model = find_sp_model(args.sp_model, run_dir)
    try:
        pieces = vocab_size_of(sp_model)
        stats = text_stats(args.text)
    except UsageError as e:
        raise UsageExit(str(e)) from e
    except DataError as e:
        raise RuntimeExit(str(e)) from e
    if pieces != model.config.vocab_size:
        raise RuntimeExit(
            f"the tokenizer {sp_model} has {pieces} pieces but the model "
            f"{model.config.vocab_size}; pass the --sp_model the model was trained with"
        )
    with tempfile.TemporaryDirectory(prefix="partf-evaluate-") as folder:
        token_file = Path(folder) / "text.tokens"
        num_tokens = tokenize_file(args.text, sp_model, token_file)
        tokens = np.array(read_token_file(token_file), np.int32)
    try:
        batches = np.ascontiguousarray(
            context_batches(tokens, model.config.batch_size, args.seq_len)
        )
    except (UsageError, DataError) as e:
        raise RuntimeExit(str(e)) from e
    _check_positions(model, batches.shape[0] * args.seq_len)
    dataset = tf.data.Dataset.from_tensor_slices((batches[:, :, :-1], batches[:, :, 1:]))
    counts = {
        "num_words": stats.num_words_with_line_ends,
        "num_chars": stats.num_chars,
        "text_tokens": num_tokens - 1,
    }
    return dataset, counts


def _check_positions(model: Any, tokens_per_stream: int) -> None:
    try:
        model.check_positions(tokens_per_stream)
    except ValueError as e:
        raise RuntimeExit(str(e)) from e


# ---------------------------------------------------------------------- main
def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    """Loads the model, scores the split and returns the report (with what was scored)."""
    from partf.training.evaluation.evaluators import make_evaluator
    from partf.training.evaluation.perplexity import score

    model, run_dir = load_model(args.model)
    # The block weights go to the evaluator's calls; the model keeps its own eval_mode.
    mode = args.eval_mode or model.config.eval_mode
    model.reset_state("eval")
    if args.records:
        split = _records_split(args, model, run_dir)
        dataset, counts, scored = split.dataset, split.text_counts, split.scored
    else:
        (dataset, counts), scored = _text_split(args, model, run_dir), False
    evaluator = make_evaluator(
        model, None, model.config.batch_size, args.jit_compile, mode, accuracy=scored
    )
    # Compiling and scoring a split takes from seconds to minutes: say what runs.
    logger.info("scoring %s on %s (eval_mode %s)", args.model, args.records or args.text, mode)
    # What runs, then the batches done with an ETA, then the perplexity (on stderr).
    num_batches, tokens = _sizes(dataset)
    name = Path(args.records or args.text).name  # what the progress lines call it
    report = score(evaluator, dataset, name, num_batches, tokens, counts)
    result = {"model": str(args.model), "data": str(args.records or args.text), "eval_mode": mode}
    result.update(report)
    if args.by_distance:  # _parse let it through for a task's split only
        result["by_distance"], result["predictions"] = _by_distance(args, model, mode, report)
    return result


def _by_distance(
    args: argparse.Namespace, model: Any, mode: str, report: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The accuracy per distance bucket of the MQAR split's answers and what the model
    answers (`answer_summary`), from a second pass in the same stream order."""
    from partf.errors import DataError
    from partf.training.evaluation import recall_distance as rd

    logger.info("scoring %s again, each answer by its distance from its key", args.records)
    _, _, inputs, targets = _task_of(args.records).read(args.records)
    try:
        distances = rd.answer_distances(inputs, targets)  # refuses other data first
    except DataError as e:
        raise RuntimeExit(str(e)) from e
    predictions = rd.split_predictions(model, inputs, targets, mode, args.jit_compile)
    buckets = rd.bucket_counts(distances, rd.exact_answers(predictions, targets))
    correct = sum(bucket.correct for bucket in buckets)
    counted = round(report["accuracy"] * report["num_tokens"])
    if correct != counted:  # the same predictions, unless a near tie rounds otherwise
        logger.warning(
            "the by-distance pass finds %d answers right and the scoring pass %d (sampled "
            "block weights, or a near tie that the two compiled programs round differently)",
            correct,
            counted,
        )
    return [bucket.to_dict() for bucket in buckets], rd.answer_summary(predictions, targets)


def _sizes(dataset: Any) -> tuple[int, int]:
    """(batches, target tokens per batch) of a split: a `tf.data.Dataset` of known length,
    or numpy batches (JAX); 0 where unknown."""
    if hasattr(dataset, "cardinality"):
        shape = dataset.element_spec[1].shape
        return max(int(dataset.cardinality()), 0), int(shape.num_elements() or 0)
    first = next(iter(dataset), None)
    return len(dataset), 0 if first is None else int(first[1].size)


def _format(report: dict[str, Any]) -> str:
    lines = [f"{report['model']} on {report['data']} (eval_mode {report['eval_mode']})"]
    for key, label in FIGURES:
        value = report.get(key)
        if value is None:
            text = "n/a (the data carries no counts of its text)"
        elif isinstance(value, int):
            text = f"{value:,}"
        else:
            text = f"{value:.4f}"
        lines.append(f"  {label}: {text}")
    if report.get("accuracy") is not None:  # a task's split: the answers exactly right
        lines.append(
            f"  accuracy (answers exactly right): {100 * report['accuracy']:.2f}% of "
            f"{report['num_tokens']:,} answers"
        )
    if "by_distance" in report:
        lines.append("  by distance from the key's pair to its query (tokens):")
        lines.append(f"    {'distance':<10}{'answers':>9}{'correct':>9}{'accuracy':>10}")
        for row in report["by_distance"]:
            lines.append(
                f"    {row['distance']:<10}{row['answers']:>9,}{row['correct']:>9,}"
                f"{100 * row['accuracy']:>9.2f}%"
            )
    if "predictions" in report:
        summary = report["predictions"]
        lines.append(
            f"  predictions at the answers: {summary['distinct_predictions']:,} distinct tokens, "
            f"{100 * summary['in_row']:.1f}% of them a value of the row's own pairs"
        )
    return "\n".join(lines)


def _main(args: argparse.Namespace) -> str:
    """The report of `evaluate`, as text or JSON."""
    try:
        report = evaluate(args)
    except OSError as e:  # a file that cannot be read or written: its name, in one line
        raise RuntimeExit(f"{e.strerror or e}: {e.filename or ''}") from e
    return json.dumps(report) if args.json else _format(report)


def run(argv: Sequence[str] | None = None) -> int:
    """Entry point of partf-evaluate: the exit status of a run on `argv` (the arguments
    without the program name; default sys.argv[1:])."""
    return run_command(PROG, argv, _parse, _main)


if __name__ == "__main__":
    sys.exit(run())
