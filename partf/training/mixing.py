"""Recall beside perplexity: MQAR batches mixed into a stream of text batches.

With `--mix_directory`, one batch of an MQAR split goes into the training stream after
every `--mix_every` text batches (docs/training.md, "Recall beside perplexity"); this
module makes the mixed stream, and `partf.training.splits.load_data` reads the split and
checks that it fits the text. The MQAR tokens are ids of the text's vocabulary as they
are: with V at most the first cutoff every answer is a head token of the adaptive softmax.

The mixed stream is the same every epoch: the text batches in order, and after every
`every`-th of them the next MQAR batch, cycled when the split is shorter than the epoch
needs, so a resumed run skips into it as into any other training split. Row r of every
batch is still row r of the text stream; an MQAR batch between two text batches is, for
the XL memory, like a document boundary (the memory is not reset). On TensorFlow the
stream is a `tf.data.Dataset` of known length, elsewhere `ArrayBatches` in the same order.
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


def mixed_arrays(
    text: tuple[np.ndarray, np.ndarray], mqar: tuple[np.ndarray, np.ndarray], choices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The mixed stream as numpy batches: of `text` and `mqar`, each (inputs, targets)
    [n, B, L], the (inputs, targets) [len(choices), B, L] holding text batch i at the i-th
    `TEXT` position and MQAR batch j (cycled over the split's) at the j-th `MQAR` one."""
    at_text, at_mqar = np.flatnonzero(choices == TEXT), np.flatnonzero(choices == MQAR)
    if len(at_text) != len(text[0]):
        raise ValueError(f"{len(at_text)} text positions for {len(text[0])} text batches")
    picked = np.arange(len(at_mqar)) % len(mqar[0])
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
