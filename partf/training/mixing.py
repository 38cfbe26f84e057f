"""Recall beside perplexity: MQAR batches mixed into a text stream, and MQAR splits read
as tasks of a text run (`--mix_directory`, `--recall_directory`).

A text run can be asked the question of associative recall on its own data: with
`--mix_directory`, one batch of an MQAR split (partf.data.mqar) goes into the training
stream after every `--mix_every` text batches, and with `--recall_directory` an MQAR
split is scored at the end by its exact answers, beside the text's perplexity.

The MQAR tokens are used as they are, as ids of the text's vocabulary: keys 1 .. V/2 - 1
and values V/2 .. V - 1 of an MQAR vocabulary of V are the tokenizer's pieces 1 .. V - 1,
so V may not exceed the text's vocabulary. SentencePiece numbers its pieces roughly by
frequency, and the adaptive softmax puts the ids below its first cutoff in its head:
with V at most that cutoff, every answer is a head token (with V = 256 and cutoffs 250
and 2500, values 250 .. 255 fall in the first tail cluster). The meaning the pieces have
in text is noise the model must learn to ignore in an MQAR row.

The mixed stream (`mixed_split`) is the same every epoch: the text batches in order, and
after every `every`-th of them the next MQAR batch, the split's batches taken in order
from its start and cycled when it is shorter than the epoch needs. So an epoch has
`text + text // every` batches, and a resumed run skips into it as into any other
training split. Row r of every batch is still row r of the text stream, continued from
one text batch to the next; the MQAR batch between them is, for the XL memory, like a
document boundary: the next text batch sees the MQAR rows in its memory instead of the
text before it (the memory is not reset), and the training loss averages over both
kinds of batch.

On TensorFlow the stream is a `tf.data.Dataset` of known length
(`Dataset.choose_from_datasets` with a fixed choice per position); on the other backends
the `ArrayBatches` in the same order, made with numpy alone.

Example:
    >>> mix_choices(3, 1).tolist()        # text, MQAR, text, MQAR, text, MQAR
    [0, 1, 0, 1, 0, 1]
    >>> mix_choices(5, 2).tolist()
    [0, 0, 1, 0, 0, 1, 0]
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from partf.training.config import ConfigError, TrainConfig
from partf.training.splits import ArrayBatches, Split, load_split

logger = logging.getLogger("partf.training")

#: A position of the mixed stream holding a text batch, and one holding an MQAR batch.
TEXT, MQAR = 0, 1


def mix_choices(text_batches: int, every: int) -> np.ndarray:
    """Which batch each position of the mixed stream holds, int64 [text + text // every]:
    `TEXT` or `MQAR`, one MQAR position after every `every` text positions."""
    if text_batches < 1 or every < 1:
        raise ValueError(f"need text batches and every >= 1, got {text_batches} and {every}")
    choices = []
    for i in range(text_batches):
        choices.append(TEXT)
        if (i + 1) % every == 0:
            choices.append(MQAR)
    return np.asarray(choices, np.int64)


def task_splits(config: TrainConfig, train: Split, vocab_size: int) -> tuple[Split, Split | None]:
    """The training split with the batches of `--mix_directory` mixed in (as it is without
    one), and the split of `--recall_directory` (None without one).

    Raises:
        ConfigError: a split that does not fit the training records (`read_task_split`),
            or MQAR mixed into records that are not text.
    """
    recall = None
    if config.recall_directory:
        recall = read_task_split(config.recall_directory, "--recall_directory", train, vocab_size)
    if not config.mix_directory:
        return train, recall
    if train.task != "text":
        raise ConfigError(
            f"--mix_directory mixes MQAR batches into text, but the training records are "
            f"{train.task} data; drop --mix_directory or train on text records."
        )
    mqar = read_task_split(config.mix_directory, "--mix_directory", train, vocab_size)
    mixed = mixed_split(train, mqar, config.mix_every)
    logger.info(
        "%d MQAR batches of %s mixed into the %d text batches of each epoch (one after every "
        "%d): %d batches per epoch",
        mixed.num_batches - train.num_batches,
        config.mix_directory,
        train.num_batches,
        config.mix_every,
        mixed.num_batches,
    )
    return mixed, recall


def read_task_split(directory: str, flag: str, train: Split, vocab_size: int) -> Split:
    """The MQAR split `directory` names (`flag` is its flag, for messages), checked to fit
    the training records: the same batch shape, and tokens within the text's vocabulary.

    Raises:
        ConfigError: not an MQAR split, another batch shape, too large a vocabulary.
        DataError: a damaged split file.
    """
    from partf.data.mqar import is_mqar

    if not is_mqar(directory):
        raise ConfigError(
            f"{flag} {directory} is not an MQAR split (a folder with mqar.json); write one "
            f"with partf-build-data --task=mqar --batch_size={train.batch_size} "
            f"--seq_len={train.seq_len}."
        )
    split = load_split(directory, flag)
    if (split.batch_size, split.seq_len) != (train.batch_size, train.seq_len):
        raise ConfigError(
            f"{flag} {directory} has batches of {split.batch_size}x{split.seq_len} but the "
            f"training records {train.batch_size}x{train.seq_len}; build the [mqar] split "
            f"with the text's --batch_size={train.batch_size} and --seq_len={train.seq_len}."
        )
    if split.vocab_size > vocab_size:
        raise ConfigError(
            f"{flag} {directory} has an MQAR vocabulary of {split.vocab_size} tokens but the "
            f"text's has {vocab_size}; build the [mqar] split with --vocab_size <= "
            f"{vocab_size}, its tokens being ids of the text's vocabulary."
        )
    return split


def mixed_split(train: Split, mqar: Split, every: int) -> Split:
    """`train` with a batch of `mqar` after every `every` of its batches (module
    docstring): a split of `train.num_batches + train.num_batches // every` batches, of
    the same kind as `train.dataset` (a `tf.data.Dataset`, or `ArrayBatches`)."""
    choices = mix_choices(train.num_batches, every)
    if isinstance(train.dataset, ArrayBatches):
        dataset: Any = mixed_arrays(train.dataset, mqar.dataset, choices)
    else:
        dataset = mixed_dataset(train.dataset, mqar.dataset, choices)
    return dataclasses.replace(train, dataset=dataset, num_batches=len(choices))


def mqar_indices(choices: np.ndarray, mqar_batches: int) -> np.ndarray:
    """The MQAR batch at each MQAR position of `choices`: 0, 1, ... cycled over the
    split's `mqar_batches`."""
    return np.arange(int(np.sum(choices == MQAR))) % mqar_batches


def mixed_arrays(text: ArrayBatches, mqar: ArrayBatches, choices: np.ndarray) -> ArrayBatches:
    """The mixed stream as numpy batches: text batch i at the i-th `TEXT` position, MQAR
    batch `mqar_indices(...)[j]` at the j-th `MQAR` position."""
    at_text, at_mqar = np.flatnonzero(choices == TEXT), np.flatnonzero(choices == MQAR)
    if len(at_text) != len(text):
        raise ValueError(f"{len(at_text)} text positions for {len(text)} text batches")
    picked = mqar_indices(choices, len(mqar))
    arrays = []
    for text_part, mqar_part in ((text.inputs, mqar.inputs), (text.targets, mqar.targets)):
        dtype = np.result_type(text_part.dtype, mqar_part.dtype)
        mixed = np.empty((len(choices), *text_part.shape[1:]), dtype)
        mixed[at_text] = text_part
        mixed[at_mqar] = mqar_part[picked]
        arrays.append(mixed)
    return ArrayBatches(*arrays)


def mixed_dataset(text: Any, mqar: Any, choices: np.ndarray) -> Any:
    """The mixed stream as a `tf.data.Dataset` of known length: `choose_from_datasets`
    over the text and the MQAR split repeated (as many of its batches as `choices`
    asks for), the fixed `choices` saying which one each position takes."""
    import tensorflow as tf

    inserted = int(np.sum(choices == MQAR))
    streams = [text, mqar.repeat().take(inserted)]
    chosen = tf.data.Dataset.choose_from_datasets(
        streams, tf.data.Dataset.from_tensor_slices(choices)
    )
    return chosen.apply(tf.data.experimental.assert_cardinality(len(choices)))
