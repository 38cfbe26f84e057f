"""Perplexity arithmetic against a hand computation, with a final padded batch."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from partf.training.evaluation.perplexity import Evaluator, SplitStats, perplexity_report


class CountingModel(keras.Model):
    """A contract-shaped model whose NLL is known in closed form.

    Hidden state = input id + number of batches seen since the evaluation memory was
    emptied; NLL of a target = 0.1 * target + 0.01 * hidden (0 on padding). The memory
    makes the result depend on the memory starting empty.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.eval_seen = self.add_weight(shape=(), initializer="zeros", trainable=False)
        self.train_seen = self.add_weight(shape=(), initializer="zeros", trainable=False)

    def call(self, inputs, training=False):
        seen = self.train_seen if training else self.eval_seen
        hidden = keras.ops.cast(inputs, "float32") + seen
        seen.assign_add(1.0)
        return hidden

    def token_nll(self, hidden, targets):
        nll = 0.1 * keras.ops.cast(targets, "float32") + 0.01 * hidden
        return nll * keras.ops.cast(keras.ops.not_equal(targets, 0), "float32")

    def reset_state(self, which="all"):
        if which in ("all", "eval"):
            self.eval_seen.assign(0.0)
        if which in ("all", "train"):
            self.train_seen.assign(0.0)


def _split():
    rng = np.random.default_rng(0)
    batches = rng.integers(1, 50, size=(3, 2, 5, 2)).astype("int32")  # [n, (x, y), B, T]
    # The final batch is partial: its second row and the tail of its first are padding.
    batches[2, 1, 1, :] = 0
    batches[2, 1, 0, 1] = 0
    return batches


def _hand_sums(batches):
    total, count, exp_sum = 0.0, 0, 0.0
    for i, (x, y) in enumerate(batches):
        mask = y != 0
        nll = (0.1 * y + 0.01 * (x + i)) * mask
        total += nll.sum()
        count += int(mask.sum())
        exp_sum += math.exp(nll.sum() / mask.sum())
    return total, count, exp_sum


# XLA with the split in one chunk, XLA in chunks of 2 batches (2 + 1), no XLA.
@pytest.fixture(scope="module", params=[(True, 256), (True, 2), (False, 256)], ids=str)
def evaluated(request):
    jit_compile, chunk = request.param
    batches = _split()
    dataset = tf.data.Dataset.from_tensor_slices((batches[:, 0], batches[:, 1]))
    model = CountingModel(name="counting")
    model.train_seen.assign(7.0)
    evaluator = Evaluator(model, jit_compile=jit_compile, chunk=chunk)
    model.eval_seen.assign(5.0)  # leftover memory: evaluation must start empty
    first = evaluator.evaluate(dataset)
    second = evaluator.evaluate(dataset)
    return batches, model, first, second


def test_sums_match_a_hand_computation(evaluated):
    batches, _, stats, _ = evaluated
    total, count, exp_sum = _hand_sums(batches)
    assert stats.num_batches == 3
    assert stats.num_tokens == count == 3 * 5 * 2 - 3
    assert stats.total_nll == pytest.approx(total, rel=1e-6)
    assert stats.sum_exp_batch_loss == pytest.approx(exp_sum, rel=1e-6)


def test_memory_starts_empty_and_training_memory_is_untouched(evaluated):
    _, model, first, second = evaluated
    assert second == first
    assert float(model.train_seen.numpy()) == 7.0


def test_report_figures(evaluated):
    batches, _, stats, _ = evaluated
    total, count, exp_sum = _hand_sums(batches)
    report = perplexity_report(stats, num_words=10, num_chars=40)
    assert report["loss"] == pytest.approx(total / count, rel=1e-6)
    assert report["perplexity"] == pytest.approx(math.exp(total / count), rel=1e-6)
    # The original's figure averages exp(batch loss): the padded batch weighs as much as
    # a full one, so it differs from the token-weighted perplexity.
    assert report["perplexity_original"] == pytest.approx(exp_sum / 3, rel=1e-6)
    assert report["perplexity_original"] != pytest.approx(report["perplexity"], rel=1e-3)
    assert report["word_perplexity"] == pytest.approx(math.exp(total / 10), rel=1e-6)
    assert report["bits_per_character"] == pytest.approx(total / (40 * math.log(2)), rel=1e-6)


def test_counts_scale_when_records_cover_part_of_the_text():
    stats = SplitStats(total_nll=90.0, num_tokens=30, num_batches=1, sum_exp_batch_loss=20.0)
    # 30 of 40 tokens scored: the 100 words and 400 characters scale to 75 and 300.
    report = perplexity_report(stats, num_words=100, num_chars=400, text_tokens=40)
    assert report["word_perplexity"] == pytest.approx(math.exp(90.0 / 75))
    assert report["bits_per_character"] == pytest.approx(90.0 / (300 * math.log(2)))
    unknown = perplexity_report(stats)
    assert unknown["word_perplexity"] is None and unknown["bits_per_character"] is None


@pytest.mark.parametrize("jit_compile", [True, False])
def test_an_empty_dataset_scores_nothing(jit_compile):
    empty = tf.data.Dataset.from_tensor_slices(
        (np.zeros((0, 2, 5), "int32"), np.zeros((0, 2, 5), "int32"))
    )
    stats = Evaluator(CountingModel(), jit_compile=jit_compile).evaluate(empty)
    assert stats == SplitStats(0.0, 0, 0, 0.0)


def test_empty_split_is_an_error():
    with pytest.raises(ValueError, match="no target tokens"):
        perplexity_report(SplitStats(0.0, 0, 0, 0.0))


@pytest.mark.parametrize("jit_compile", [True, False])
def test_a_pass_in_chunks_gives_the_one_pass_sums_exactly(jit_compile):
    """The memory carries from chunk to chunk (and the padding of the last chunk is
    dropped), so scoring in chunks, which reports progress between them, changes nothing."""
    rng = np.random.default_rng(1)
    batches = rng.integers(0, 50, size=(7, 2, 3, 5)).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((batches[:, 0], batches[:, 1]))
    model = CountingModel()
    whole = Evaluator(model, jit_compile=jit_compile, chunk=256).evaluate(dataset)
    for chunk, reports in ((2, [2, 4, 6, 7]), (3, [3, 6, 7])):
        done = []
        chunked = Evaluator(model, jit_compile=jit_compile, chunk=chunk)
        stats = chunked.evaluate(dataset, progress=done.append)
        assert stats == whole  # exact: every sum, in float64, of the same per-batch pairs
        assert done == reports  # with XLA the last chunk is padded: 4 x 2, 3 x 3
    assert whole.num_batches == 7


def test_accuracy_counts_exact_answers_at_scored_positions_only():
    """A recall task's accuracy (MQAR): the evaluator's count of correct targets equals a
    direct count of argmax == target over the positions whose target is not 0, and the
    positions with target 0 (everything but the answers) are not counted."""
    from partf.models import ModelConfig, PARTransformerXL
    from partf.tasks.mqar import MQARSettings, draw_split

    settings = MQARSettings(
        seq_len=16, pairs=(3,), vocab_size=16, batch_size=4, train_examples=8,
        eval_examples=8,
    )  # fmt: skip
    inputs, targets = draw_split(settings, "valid")  # [2, 4, 16]
    config = ModelConfig(
        vocab_size=16, d_model=16, num_heads=2, d_ffn=32, num_layers=2, mem_len=0,
        cutoffs=(), batch_size=4, dropout_rate=0.0, architecture="A D",
    )  # fmt: skip
    keras.utils.set_random_seed(0)
    model = PARTransformerXL(config)
    best = np.concatenate(
        [np.argmax(keras.ops.convert_to_numpy(model.log_probs(model(x))), -1) for x in inputs]
    ).reshape(targets.shape)
    # Make the model right at two answers of every row (so the count is not 0 by chance).
    targets = targets.copy()
    for b, r in np.ndindex(targets.shape[:2]):
        answers = np.flatnonzero(targets[b, r])[:2]
        targets[b, r, answers] = np.maximum(best[b, r, answers], 1)
    stats = Evaluator(model, jit_compile=False, accuracy=True).evaluate(
        tf.data.Dataset.from_tensor_slices((inputs, targets))
    )
    scored = targets != 0
    assert ((best == targets) & scored).sum() >= 8
    assert stats.num_tokens == int(scored.sum()) == 2 * 4 * 3
    assert stats.num_correct == int(((best == targets) & scored).sum())
    assert perplexity_report(stats)["accuracy"] == stats.num_correct / stats.num_tokens
    # Without accuracy nothing is counted, and the report says so.
    plain = Evaluator(model, jit_compile=False).evaluate(
        tf.data.Dataset.from_tensor_slices((inputs, targets))
    )
    assert plain.num_correct is None and perplexity_report(plain)["accuracy"] is None
