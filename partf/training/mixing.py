"""Recall beside perplexity: MQAR batches mixed into a stream of text batches.

A text run can be asked the question of associative recall on its own data: with
`--mix_directory`, one batch of an MQAR split (partf.tasks.mqar) goes into the training
stream after every `--mix_every` text batches, and with `--recall_directory` an MQAR
split is scored at the end by its exact answers, beside the text's perplexity. This
module makes the mixed stream from the two streams of batches;
`partf.training.splits.load_data` reads the MQAR splits, checks that they fit the text
(batch shape, vocabulary) and makes the mixed training split (`mixed_split`).

The MQAR tokens are used as they are, as ids of the text's vocabulary: keys 1 .. V/2 - 1
and values V/2 .. V - 1 of an MQAR vocabulary of V are the tokenizer's pieces 1 .. V - 1,
so V may not exceed the text's vocabulary. SentencePiece numbers its pieces roughly by
frequency, and the adaptive softmax puts the ids below its first cutoff in its head:
with V at most that cutoff, every answer is a head token (with V = 256 and cutoffs 250
and 2500, values 250 .. 255 fall in the first tail cluster). The meaning the pieces have
in text is noise the model must learn to ignore in an MQAR row.

The mixed stream is the same every epoch: the text batches in order, and
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

from typing import Any

import numpy as np

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


def mqar_indices(choices: np.ndarray, mqar_batches: int) -> np.ndarray:
    """The MQAR batch at each MQAR position of `choices`: 0, 1, ... cycled over the
    split's `mqar_batches`."""
    return np.arange(int(np.sum(choices == MQAR))) % mqar_batches


def mixed_arrays(
    text: tuple[np.ndarray, np.ndarray], mqar: tuple[np.ndarray, np.ndarray], choices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The mixed stream as numpy batches: of `text` and `mqar`, each (inputs, targets)
    [n, B, L], the (inputs, targets) [len(choices), B, L] holding text batch i at the i-th
    `TEXT` position and MQAR batch `mqar_indices(...)[j]` at the j-th `MQAR` position."""
    at_text, at_mqar = np.flatnonzero(choices == TEXT), np.flatnonzero(choices == MQAR)
    if len(at_text) != len(text[0]):
        raise ValueError(f"{len(at_text)} text positions for {len(text[0])} text batches")
    picked = mqar_indices(choices, len(mqar[0]))
    mixed = []
    for text_part, mqar_part in zip(text, mqar, strict=True):
        dtype = np.result_type(text_part.dtype, mqar_part.dtype)
        part = np.empty((len(choices), *text_part.shape[1:]), dtype)
        part[at_text] = text_part
        part[at_mqar] = mqar_part[picked]
        mixed.append(part)
    return mixed[0], mixed[1]


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
