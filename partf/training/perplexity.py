"""Exact perplexity of a whole split, and the figures other papers and the original report.

Per split we accumulate, in float64, the total negative log-likelihood (nats) of every
non-pad target token and the number of such tokens, plus the original project's figure.
From those:

- `perplexity` = exp(total NLL / tokens): exact and token-weighted. A final batch padded
  with zeros counts only its real tokens.
- `perplexity_original` = mean over batches of exp(batch loss): what the original
  Jmkernes/PAR-Transformer-XL prints and tabulates. It is not a perplexity of the split
  (by Jensen's inequality it is at least `perplexity`); keep it only to compare with that
  table.
- `word_perplexity` = exp(total NLL / words), words counted with one end-of-line per line
  (the WikiText convention; 245,569 for the WikiText-2 test split). Comparable with
  published word-level numbers whatever the tokenizer.
- `bits_per_character` = total NLL / (characters * ln 2).

When the records hold only part of the text (context batching drops the last partial
batch), the word and character counts are scaled by the fraction of the text's tokens that
were scored, `tokens / text_tokens`, if `text_tokens` is known.

Example:
    >>> stats = SplitStats(total_nll=69.3, num_tokens=30, num_batches=2,
    ...                    sum_exp_batch_loss=20.1)
    >>> round(perplexity_report(stats)["perplexity"], 2)
    10.1
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from keras import ops

if TYPE_CHECKING:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class SplitStats:
    """Sums over one pass of a split.

    Attributes:
        total_nll: sum of the NLL (nats) of every non-pad target token.
        num_tokens: number of non-pad target tokens.
        num_batches: number of batches.
        sum_exp_batch_loss: sum over batches of exp(mean NLL of the batch's tokens).
    """

    total_nll: float
    num_tokens: int
    num_batches: int
    sum_exp_batch_loss: float


def perplexity_report(
    stats: SplitStats,
    num_words: int | None = None,
    num_chars: int | None = None,
    text_tokens: int | None = None,
) -> dict[str, float | None]:
    """Every figure of a split from its sums.

    Args:
        stats: sums from `Evaluator.evaluate` (or any pass over the split).
        num_words: words plus line ends of the raw text, or None if unknown.
        num_chars: characters of the raw text (newlines included), or None.
        text_tokens: target tokens the whole text would give (to correct for a dropped
            tail), or None to assume the records cover the whole text.

    Returns:
        {"loss", "perplexity", "perplexity_original", "word_perplexity",
        "bits_per_character", "num_tokens", "num_batches"}; a figure that cannot be
        computed is None.
    """
    if stats.num_tokens <= 0:
        raise ValueError("the split has no target tokens; check that its records are not empty.")
    loss = stats.total_nll / stats.num_tokens
    coverage = 1.0
    if text_tokens:
        coverage = min(stats.num_tokens / text_tokens, 1.0)
    word = char = None
    if num_words:
        word = _safe_exp(stats.total_nll / (num_words * coverage))
    if num_chars:
        char = stats.total_nll / (num_chars * coverage * math.log(2.0))
    return {
        "loss": loss,
        "perplexity": _safe_exp(loss),
        "perplexity_original": stats.sum_exp_batch_loss / max(stats.num_batches, 1),
        "word_perplexity": word,
        "bits_per_character": char,
        "num_tokens": stats.num_tokens,
        "num_batches": stats.num_batches,
    }


def _safe_exp(x: float) -> float:
    return math.exp(x) if x < 700 else math.inf


class Evaluator:
    """Scores splits with a model's evaluation memory, starting empty each time.

    The per-batch work (forward pass and the adaptive softmax NLL) is one compiled
    function; the loop over the dataset runs in a `tf.function` too, so a whole split
    costs one call from Python. Only the evaluation state variables are touched
    (`training=False`), so the training memory is left as it was.

    Args:
        model: a model following partf's model contract (`model(x, training=False)`,
            `token_nll`, `reset_state`).
        jit_compile: compile the per-batch function with XLA.

    Example:
        >>> stats = Evaluator(model).evaluate(valid_dataset)
    """

    def __init__(self, model: Any, jit_compile: bool = True) -> None:
        import tensorflow as tf  # here, so SplitStats and the report load without it

        self.model = model

        def batch_sums(inputs, targets):
            hidden = model(inputs, training=False)
            nll = ops.cast(model.token_nll(hidden, targets), "float32")  # [B, T]
            count = ops.sum(ops.cast(ops.not_equal(targets, 0), "float32"))
            total = ops.sum(nll)
            return total, count, ops.exp(total / ops.maximum(count, 1.0))

        step = tf.function(batch_sums, jit_compile=jit_compile, reduce_retracing=True)

        def run(dataset):
            total = tf.constant(0.0, tf.float64)
            count = tf.constant(0.0, tf.float64)
            exp_sum = tf.constant(0.0, tf.float64)
            batches = tf.constant(0, tf.int64)
            for inputs, targets in dataset:
                t, c, e = step(inputs, targets)
                total += tf.cast(t, tf.float64)
                count += tf.cast(c, tf.float64)
                exp_sum += tf.cast(e, tf.float64)
                batches += 1
            return total, count, exp_sum, batches

        self._run = tf.function(run, reduce_retracing=True)

    def evaluate(self, dataset: tf.data.Dataset) -> SplitStats:
        """One pass over `dataset` of (inputs, targets) int32 [B, T], memory starting empty.

        Args:
            dataset: the split, batches in stream order.

        Returns:
            Its `SplitStats`.
        """
        self.model.reset_state("eval")
        total, count, exp_sum, batches = self._run(dataset)
        self.model.reset_state("eval")
        return SplitStats(
            total_nll=float(total),
            num_tokens=int(round(float(count))),
            num_batches=int(batches),
            sum_exp_batch_loss=float(exp_sum),
        )
