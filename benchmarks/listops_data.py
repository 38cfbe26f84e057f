"""ListOps: nested list operations on digits, the long-range classification task.

An example is a bracketed expression such as

    [MAX 2 9 [MIN 4 7 ] 0 ]        -> 9

over digits 0-9 with four operators: MAX, MIN, MED (the median, rounded down when
the count is even) and SM (the sum modulo 10). The label is the value, one of 10
classes. Trees are drawn as in the Long Range Arena generator: below the depth limit a
node is an operator with probability `operator_p` (0.25) taking 2 to `max_args` (10)
arguments, otherwise a digit; a tree whose token count falls outside
[`min_length`, `max_length`] (LRA: 500 to 2,000) is drawn again. The root is always an
operator. Token count: one per digit, operator and closing bracket (LRA drops the
parentheses of its text form before tokenizing, as here).

Depth counts nested operators: a digit has depth 0, "[MAX 1 2 ]" depth 1, and
`max_depth` bounds it (LRA's generator, started at depth 1 with limit 10, nests at
most 9 operators; pass `max_depth=9` to match it exactly).

Records: each split is one TFRecord file of `tf.train.Example`s with an int64 list
"tokens" (ids of `VOCABULARY`, no padding) and an int64 "label", and the folder holds
`listops.json` (the generator's settings, the vocabulary and the counts).
`read_listops` gives (tokens int32 [L], mask bool [L], label int32), padded with id 0
to the folder's `max_length`.

References:
    Nangia and Bowman, "ListOps: A Diagnostic Dataset for Latent Tree Learning",
    NAACL SRW 2018. Tay et al., "Long Range Arena", ICLR 2021.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from partf.errors import DataError, UsageError

OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
CLOSE = "]"
DIGITS = tuple(str(d) for d in range(10))
#: Token strings by id; id 0 is padding.
VOCABULARY = ("<pad>", *DIGITS, *OPERATORS, CLOSE)
TOKEN_ID = {token: i for i, token in enumerate(VOCABULARY)}
NUM_CLASSES = 10
SPLITS = ("train", "valid", "test")
METADATA_FILE = "listops.json"

# A tree: a digit (int) or (operator token, [subtrees]).
Tree = Any


@dataclasses.dataclass(frozen=True)
class ListOpsSettings:
    """How trees are drawn (defaults: LRA's ListOps)."""

    max_depth: int = 10  # most operators nested inside one another
    max_args: int = 10  # most arguments of one operator (at least 2)
    min_length: int = 500  # fewest tokens of an example
    max_length: int = 2000  # most tokens of an example
    operator_p: float = 0.25  # chance a node below max_depth is an operator

    def __post_init__(self) -> None:
        if self.max_depth < 1 or self.max_args < 2:
            raise UsageError(
                f"ListOps needs max_depth >= 1 and max_args >= 2, got max_depth="
                f"{self.max_depth}, max_args={self.max_args}."
            )
        # The smallest tree is one operator over two digits: 4 tokens.
        if not 4 <= self.min_length <= self.max_length:
            raise UsageError(
                f"ListOps needs 4 <= min_length <= max_length, got min_length="
                f"{self.min_length}, max_length={self.max_length}."
            )
        if not 0.0 < self.operator_p < 1.0:
            raise UsageError(f"operator_p must lie in (0, 1), got {self.operator_p}.")


def apply_operator(operator: str, values: Sequence[int]) -> int:
    """The value of `operator` ("[MAX", "[MIN", "[MED" or "[SM") on digits."""
    if operator == "[MAX":
        return max(values)
    if operator == "[MIN":
        return min(values)
    if operator == "[MED":
        ordered = sorted(values)
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        # int(np.median(...)) in the LRA generator: the mean of the two, rounded down.
        return (ordered[middle - 1] + ordered[middle]) // 2
    if operator == "[SM":
        return sum(values) % 10
    raise ValueError(f"unknown ListOps operator {operator!r}; use one of {', '.join(OPERATORS)}.")


def _draw_tree(rng: np.random.Generator, depth: int, settings: ListOpsSettings) -> Tree:
    """A subtree whose operators sit at `depth` + 1 and deeper (the root: depth 0)."""
    is_operator = depth == 0 or (depth < settings.max_depth and rng.random() < settings.operator_p)
    if not is_operator:
        return int(rng.integers(10))
    operator = OPERATORS[int(rng.integers(len(OPERATORS)))]
    count = int(rng.integers(2, settings.max_args + 1))
    return operator, [_draw_tree(rng, depth + 1, settings) for _ in range(count)]


def tree_tokens(tree: Tree) -> list[str]:
    """The token strings of a tree: "[MAX", arguments..., "]"."""
    if isinstance(tree, int):
        return [str(tree)]
    operator, arguments = tree
    tokens = [operator]
    for argument in arguments:
        tokens.extend(tree_tokens(argument))
    tokens.append(CLOSE)
    return tokens


def tree_value(tree: Tree) -> int:
    """The value of a tree, 0-9."""
    if isinstance(tree, int):
        return tree
    operator, arguments = tree
    return apply_operator(operator, [tree_value(argument) for argument in arguments])


def generate_listops(
    num_examples: int, seed: int | Sequence[int], settings: ListOpsSettings | None = None
) -> list[tuple[np.ndarray, int]]:
    """`num_examples` ListOps examples, the same for the same seed and settings.

    Returns:
        A list of (token ids int32 [n] with min_length <= n <= max_length, label 0-9).

    Example:
        >>> tokens, label = generate_listops(1, seed=0, settings=ListOpsSettings(
        ...     max_depth=2, min_length=4, max_length=40))[0]
    """
    settings = settings or ListOpsSettings()
    if num_examples < 0:
        raise UsageError(f"num_examples must be >= 0, got {num_examples}.")
    rng = np.random.default_rng(seed)
    examples = []
    while len(examples) < num_examples:
        tree = _draw_tree(rng, 0, settings)
        tokens = tree_tokens(tree)
        if settings.min_length <= len(tokens) <= settings.max_length:
            ids = np.array([TOKEN_ID[token] for token in tokens], dtype=np.int32)
            examples.append((ids, tree_value(tree)))
    return examples


def decode(ids: Sequence[int]) -> str:
    """Token ids -> the expression's text, padding dropped."""
    return " ".join(VOCABULARY[int(i)] for i in ids if int(i) != 0)


# ------------------------------------------------------------------- records
def _example(tokens: np.ndarray, label: int) -> bytes:
    import tensorflow as tf

    feature = {
        "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=tokens.tolist())),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_listops(
    directory: str | os.PathLike,
    counts: dict[str, int],
    seed: int,
    settings: ListOpsSettings | None = None,
) -> dict[str, Any]:
    """Writes each split to `directory`/<split>.tfrecords (`counts`: examples per split)
    and listops.json, and returns the metadata written. Each split draws from its own
    seed (`seed` and its index in `SPLITS`), so each is reproducible alone."""
    import tensorflow as tf

    settings = settings or ListOpsSettings()
    unknown = sorted(set(counts) - set(SPLITS))
    if unknown:
        raise UsageError(f"unknown ListOps splits {unknown}; use {', '.join(SPLITS)}.")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for split, count in counts.items():
        examples = generate_listops(count, seed=[seed, SPLITS.index(split)], settings=settings)
        with tf.io.TFRecordWriter(str(directory / f"{split}.tfrecords")) as writer:
            for tokens, label in examples:
                writer.write(_example(tokens, label))
    metadata = {
        "task": "listops",
        "seed": seed,
        "settings": dataclasses.asdict(settings),
        "vocabulary": list(VOCABULARY),
        "num_classes": NUM_CLASSES,
        "counts": dict(counts),
    }
    (directory / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
    return metadata


def read_listops_metadata(directory: str | os.PathLike) -> dict[str, Any]:
    """The listops.json of a folder written by `write_listops`."""
    path = Path(directory) / METADATA_FILE
    if not path.is_file():
        raise DataError(f"{path} is missing; write the ListOps records with write_listops first.")
    return json.loads(path.read_text())


def read_listops(directory: str | os.PathLike, split: str, batch_size: int | None = None):
    """A tf.data dataset of (tokens int32 [L], mask bool [L], label int32) for `split`.

    Tokens are padded with id 0 to L = the folder's max_length, so shapes are static;
    `mask` is True for real tokens. With `batch_size`, batches of that many (the last
    one kept even if smaller).
    """
    import tensorflow as tf

    metadata = read_listops_metadata(directory)
    path = Path(directory) / f"{split}.tfrecords"
    if not path.is_file():
        raise DataError(f"{path} is missing; write_listops wrote {sorted(metadata['counts'])}.")
    length = int(metadata["settings"]["max_length"])
    features = {
        "tokens": tf.io.VarLenFeature(tf.int64),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        tokens = tf.cast(tf.sparse.to_dense(example["tokens"]), tf.int32)
        tokens = tf.pad(tokens, [[0, length - tf.shape(tokens)[0]]])
        tokens = tf.ensure_shape(tokens, [length])
        return tokens, tf.not_equal(tokens, 0), tf.cast(example["label"], tf.int32)

    dataset = tf.data.TFRecordDataset(str(path)).map(parse)
    return dataset if batch_size is None else dataset.batch(batch_size)
