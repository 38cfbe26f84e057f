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
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from keras import ops

from partf.console import Meter
from partf.layers.candidates import check_eval_mode
from partf.training.evaluation.block_weights import mixed_blocks

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
        num_correct: targets whose most likely token is the target itself, or None when
            not counted (a task scored by accuracy, such as MQAR, counts them).
    """

    total_nll: float
    num_tokens: int
    num_batches: int
    sum_exp_batch_loss: float
    num_correct: int | None = None


def perplexity_report(
    stats: SplitStats,
    num_words: int | None = None,
    num_chars: int | None = None,
    text_tokens: int | None = None,
) -> dict[str, float | None]:
    """Every figure of a split from its sums (module docstring): {"loss", "perplexity",
    "perplexity_original", "word_perplexity", "bits_per_character", "accuracy",
    "num_tokens", "num_batches"}; a figure that cannot be computed (or, for accuracy, was
    not counted) is None. `num_words` counts the raw text's words plus line ends,
    `num_chars` its characters (newlines included); `text_tokens` is the target tokens of
    the whole text (None: the records cover all of it).
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
        "accuracy": None if stats.num_correct is None else stats.num_correct / stats.num_tokens,
        "num_tokens": stats.num_tokens,
        "num_batches": stats.num_batches,
    }


def _safe_exp(x: float) -> float:
    return math.exp(x) if x < 700 else math.inf


def batch_nll_sums(
    model: Any, inputs: Any, targets: Any, mode: str | None = None, accuracy: bool = False
) -> tuple[Any, Any, Any]:
    """One batch through the model's evaluation memory (`evaluation_call`): float32 (NLL
    sum, target tokens, correct targets); the correct targets are 0 without `accuracy`."""
    hidden = evaluation_call(model, inputs, mode)
    nll = ops.cast(model.token_nll(hidden, targets), "float32")  # [B, T]
    scored = ops.not_equal(targets, 0)
    count = ops.sum(ops.cast(scored, "float32"))
    correct = ops.zeros((), "float32")
    if accuracy:
        best = predicted_tokens(model, hidden, targets.dtype)
        correct = ops.sum(ops.cast(exact_targets(best, targets), "float32"))
    return ops.sum(nll), count, correct


def evaluation_call(model: Any, inputs: Any, mode: str | None = None) -> Any:
    """The model's hidden states [B, T, d_model] for one batch, through its evaluation
    memory (which the call advances), with `mode` block weights when given."""
    if mode is None:  # a model of the contract need not take `mode` unless asked
        return model(inputs, training=False)
    return model(inputs, training=False, mode=mode)


def exact_targets(predicted: Any, targets: Any) -> Any:
    """bool [..., T]: the scored targets (not 0) that equal the prediction. The one test of
    an exact answer, used per batch (`batch_nll_sums`) and per split (`recall_distance`),
    so the two cannot disagree about which answers are right."""
    return ops.logical_and(ops.not_equal(targets, 0), ops.equal(predicted, targets))


def predicted_tokens(model: Any, hidden: Any, dtype: Any = "int32") -> Any:
    """[B, T] of `dtype`: the model's most likely token at every position. Takes every
    token's log-probability, [B, T, V]: affordable for a task's small vocabulary."""
    return ops.cast(ops.argmax(model.log_probs(hidden), axis=-1), dtype)


def stats_of_batches(per_batch: Any, accuracy: bool = False) -> SplitStats:
    """`SplitStats` from per-batch (NLL sum, target tokens, correct targets) sums, [N, 3],
    added in float64; the correct targets count only with `accuracy`."""
    per_batch = np.asarray(per_batch, np.float64).reshape(-1, SUMS)
    total, count, correct = per_batch[:, 0], per_batch[:, 1], per_batch[:, 2]
    return SplitStats(
        total_nll=float(total.sum()),
        num_tokens=int(round(float(count.sum()))),
        num_batches=len(per_batch),
        sum_exp_batch_loss=sum(_safe_exp(t / max(c, 1.0)) for t, c in per_batch[:, :2]),
        num_correct=int(round(float(correct.sum()))) if accuracy else None,
    )


#: The sums of one batch: NLL, target tokens, correct targets.
SUMS = 3


#: Most batches per compiled call of a pass. A pass reports its progress at the end of
#: each call: 32 batches of the base model take about 2 s on 2 CPU cores, and the call
#: itself costs far less than one batch on an accelerator.
CHUNK = 32

#: `evaluate(dataset, progress)`: called with the batches done after each chunk.
Progress = Callable[[int], None]


def chunk_size(num_batches: int, most: int | None = None) -> int:
    """Batches per chunk: the fewest chunks of at most `most` (default `CHUNK`) batches,
    all as long as the longest (the last one padded, `stacked_chunks`), so that one
    compiled program serves the whole pass and fewer than one batch per chunk is padding."""
    most = CHUNK if most is None else most
    count = -(-num_batches // max(most, 1))
    return max(-(-num_batches // max(count, 1)), 1)


def stacked_chunks(batches: Sequence[tuple[Any, Any]], size: int) -> Iterator[tuple[Any, Any, int]]:
    """(inputs, targets, real) of each chunk of `size` (inputs, targets) batches, stacked
    to [size, B, T]; the last is padded with batches of pad tokens (id 0) to `size`, and
    `real` says how many of its batches are the split's (the rest's sums are dropped; the
    memory they leave is reset after the pass)."""
    for start in range(0, len(batches), size):
        group = batches[start : start + size]
        inputs = np.stack([x for x, _ in group])
        targets = np.stack([y for _, y in group])
        pad = [(0, size - len(group))] + [(0, 0)] * (inputs.ndim - 1)
        yield np.pad(inputs, pad), np.pad(targets, pad), len(group)


def weights_note(evaluator: Any) -> str:
    """ " (argmax weights)" (the block weights a search is scored with: the evaluator's
    `mode`, else its blocks' `eval_mode`); "" for a fixed architecture."""
    blocks = mixed_blocks(getattr(evaluator, "model", None))
    if not blocks:
        return ""
    return f" ({getattr(evaluator, 'mode', None) or blocks[0].eval_mode} weights)"


def score(
    evaluator: Any,
    dataset: Any,
    name: str,
    num_batches: int,
    tokens_per_batch: int = 0,
    text_counts: dict[str, int | None] | None = None,
) -> dict[str, float | None]:
    """Scores `dataset` with `evaluator` and returns its `perplexity_report` (`text_counts`:
    its keyword arguments), with a `partf.console.Meter` named `name` and the block weights
    on the console (batches done of `num_batches`, rate, ETA; the perplexity at the end).
    """
    meter = Meter(
        f"scoring {name}{weights_note(evaluator)}", num_batches, "batches", tokens_per_batch
    )
    meter.begin()
    stats = evaluator.evaluate(dataset, progress=meter.advance)
    report = perplexity_report(stats, **(text_counts or {}))
    meter.end(f"perplexity {report['perplexity']:.2f}")
    return report


class BaseEvaluator:
    """What every evaluator shares: the model, the block weights `mode` (checked when
    built, not when first used) and `accuracy`, one batch's sums, and `evaluate`.

    A subclass yields the per-batch (NLL sum, target tokens, correct targets) sums of a
    pass, a chunk at a time, from `_chunks(dataset)`; `evaluate` empties the evaluation
    memory before and after, reports progress after each chunk and adds the sums in
    float64 (`stats_of_batches`).
    """

    def __init__(self, model: Any, mode: str | None = None, accuracy: bool = False) -> None:
        if mode is not None:
            check_eval_mode(mode)
        self.model = model
        self.mode = mode
        self.accuracy = accuracy

    def batch_sums(self, inputs: Any, targets: Any) -> tuple[Any, Any, Any]:
        # `mode` goes into every call the compiled functions trace, so each evaluator
        # keeps its own block weights, whatever others use.
        return batch_nll_sums(self.model, inputs, targets, self.mode, self.accuracy)

    def _chunks(self, dataset: Any) -> Iterator[Any]:
        raise NotImplementedError

    def evaluate(self, dataset: Any, progress: Progress | None = None) -> SplitStats:
        """The `SplitStats` of one pass over `dataset` ((inputs, targets) int32 [B, T]
        batches in stream order), memory starting empty; `progress` is called with the
        batches done after each chunk of the pass."""
        self.model.reset_state("eval")
        parts, done = [np.zeros((0, SUMS), np.float32)], 0
        for part in self._chunks(dataset):
            parts.append(part)
            done += len(part)
            if progress and len(part):
                progress(done)
        self.model.reset_state("eval")
        return stats_of_batches(np.concatenate(parts), self.accuracy)


class Evaluator(BaseEvaluator):
    """Scores splits with a model's evaluation memory, starting empty each time.

    With `jit_compile`, the split's batches are stacked and scored in chunks of up to
    `chunk` (at most `CHUNK`) batches, each chunk one XLA program (a while loop over its
    batches): one call per chunk instead of one per batch (2.5x faster for a small model
    on a CPU). Without it, a `tf.function` loops over a chunk of the dataset per call.
    Only the evaluation memory is touched (`training=False`).

    `model` follows partf's model contract (`model(x, training=False)`, `token_nll`,
    `reset_state`); `mode` is a search's block weights, "argmax", "expected" or "sample"
    (None: the model's own `eval_mode`); `accuracy` also counts the targets predicted
    exactly (`SplitStats.num_correct`).
    """

    def __init__(
        self,
        model: Any,
        jit_compile: bool = True,
        chunk: int = 256,
        mode: str | None = None,
        accuracy: bool = False,
    ) -> None:
        import tensorflow as tf  # here, so SplitStats and the report load without it

        super().__init__(model, mode, accuracy)
        self.jit_compile = jit_compile
        self.chunk = chunk

        def run_chunk(inputs, targets):
            # inputs, targets: [N, B, T]; returns float32 [N, 3] (NLL sum, tokens, correct).
            n = tf.shape(inputs)[0]
            sums = tf.TensorArray(tf.float32, size=n)

            def body(i, sums):
                return i + 1, sums.write(i, tf.stack(self.batch_sums(inputs[i], targets[i])))

            _, sums = tf.while_loop(lambda i, _: i < n, body, (0, sums))
            return sums.stack()

        self._run_chunk = tf.function(run_chunk, jit_compile=True, reduce_retracing=True)
        step = tf.function(self.batch_sums, reduce_retracing=True)

        def run(dataset):
            sums = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[SUMS])
            for i, (inputs, targets) in dataset.enumerate():
                sums = sums.write(tf.cast(i, tf.int32), tf.stack(step(inputs, targets)))
            return sums.stack()

        self._run = tf.function(run, reduce_retracing=True)

    def _chunks(self, dataset: tf.data.Dataset) -> Iterator[Any]:
        if self.jit_compile:
            batches = list(dataset.as_numpy_iterator())
            size = chunk_size(len(batches), min(self.chunk, CHUNK))
            for inputs, targets, real in stacked_chunks(batches, size):
                yield np.asarray(self._run_chunk(inputs, targets))[:real]
            return
        # Chunks of the dataset through the same traced loop; the memory carries.
        size, done = max(min(self.chunk, CHUNK), 1), 0
        while True:
            part = np.asarray(self._run(dataset.skip(done).take(size))).reshape(-1, SUMS)
            yield part
            done += len(part)
            if len(part) < size:  # a shorter chunk was the split's last
                return
