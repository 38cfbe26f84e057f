"""Scoring a search with other block weights (`partf.training.block_weights`): the same
figures as a copy of the model built with that eval_mode, the model's own mode left as it
was, and validation during a frozen pi scored by the expected mixture."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from partf.generation.model_helpers import reconfigure
from partf.models import MaskedLanguageModel, PARTransformerXL
from partf.training.block_weights import ModeEvaluator, block_weights, expected_evaluator
from partf.training.monitoring import ValidationCallback
from partf.training.perplexity import Evaluator, SplitStats
from partf.training.progress import RunProgress

VOCAB = 50


@pytest.fixture(scope="module")
def search():
    """A built search model (argmax evaluation) with distinct, non-uniform pi per block."""
    model = PARTransformerXL(
        vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=32, num_layers=3, mem_len=4,
        cutoffs=(), batch_size=2,
    )  # fmt: skip
    model(np.ones((2, 6), np.int32))
    rng = np.random.default_rng(0)
    for block in model.blocks:
        block.arch_logits.assign(rng.normal(size=3).astype("float32"))
    return model


@pytest.fixture(scope="module")
def dataset():
    rng = np.random.default_rng(1)
    stream = rng.integers(1, VOCAB, size=(3, 2, 7)).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((stream[..., :-1], stream[..., 1:]))


def _stats(model, dataset, mode=None):
    evaluator = Evaluator(model, jit_compile=False)
    if mode is not None:
        evaluator = ModeEvaluator(evaluator, model, mode)
    return evaluator.evaluate(dataset)


def test_expected_scores_like_a_model_built_with_expected_weights(search, dataset):
    own = _stats(search, dataset)
    expected = _stats(search, dataset, "expected")
    reference = _stats(reconfigure(search, eval_mode="expected"), dataset)
    assert expected.total_nll == pytest.approx(reference.total_nll, rel=1e-6)
    assert expected.num_tokens == own.num_tokens
    # A different model from the argmax one, which the wrapper left as it was.
    assert expected.total_nll != pytest.approx(own.total_nll, rel=1e-4)
    assert [b.eval_mode for b in search.blocks] == ["argmax"] * 3
    assert _stats(search, dataset).total_nll == pytest.approx(own.total_nll, rel=1e-6)


def test_block_weights_restores_the_mode_after_an_error(search):
    with pytest.raises(RuntimeError), block_weights(search, "sample"):
        assert {b.eval_mode for b in search.blocks} == {"sample"}
        raise RuntimeError
    assert {b.eval_mode for b in search.blocks} == {"argmax"}
    with pytest.raises(ValueError, match="unknown eval_mode 'mean'"):
        ModeEvaluator(None, search, "mean")


def test_only_a_search_evaluated_by_argmax_gets_an_expected_evaluator(search):
    assert expected_evaluator(search, lambda: "made").evaluator == "made"
    fixed = PARTransformerXL(
        vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=32, num_layers=2, mem_len=4,
        cutoffs=(), batch_size=2, architecture="A D",
    )  # fmt: skip
    assert expected_evaluator(fixed, lambda: "made") is None
    assert expected_evaluator(reconfigure(search, eval_mode="sample"), lambda: "made") is None


class _Fixed:
    """An evaluator that returns given figures and counts its calls."""

    def __init__(self, nll: float) -> None:
        self.stats = SplitStats(nll, 10, 1, float(np.exp(nll / 10)))
        self.calls = 0

    def evaluate(self, dataset, progress=None):
        self.calls += 1
        return self.stats


def test_validation_scores_the_mixture_while_pi_is_frozen(tmp_path):
    own, frozen = _Fixed(30.0), _Fixed(20.0)
    callback = ValidationCallback(
        RunProgress(10, 100, 16), tf.summary.create_file_writer(str(tmp_path)), own, None,
        frozen_until=50, while_frozen=frozen,
    )  # fmt: skip
    callback.set_model(SimpleNamespace(stop_training=False))
    assert callback.validate(50)["loss"] == pytest.approx(2.0)
    # Not the run's own figure: the end of training must score its own weights again.
    assert callback.report_step is None and (own.calls, frozen.calls) == (0, 1)
    assert callback.validate(51)["loss"] == pytest.approx(3.0)
    assert callback.report_step == 51 and (own.calls, frozen.calls) == (1, 1)


@pytest.fixture(scope="module")
def mlm_search():
    """A masked-LM search (the encoder's blocks) with non-uniform pi, and masked batches:
    targets hold the original token at chosen positions and 0 elsewhere."""
    model = MaskedLanguageModel(
        VOCAB, d_model=16, num_heads=2, d_ffn=32, num_layers=2,
        candidates=("attention", "dense", "identity"),
    )  # fmt: skip
    model(np.ones((2, 6), np.int32))
    rng = np.random.default_rng(2)
    for block in model.blocks:
        block.arch_logits.assign(rng.normal(size=3).astype("float32"))
    inputs = rng.integers(1, VOCAB, size=(3, 2, 6)).astype(np.int32)
    targets = np.where(rng.random(inputs.shape) < 0.3, inputs, 0).astype(np.int32)
    targets[..., 0] = inputs[..., 0]  # at least one scored position per row
    return model, tf.data.Dataset.from_tensor_slices((inputs, targets))


@pytest.mark.parametrize("mode", ["expected", "sample"])
def test_a_masked_lm_search_scores_with_other_block_weights(mlm_search, mode):
    model, dataset = mlm_search
    assert expected_evaluator(model, lambda: "made").evaluator == "made"
    own = _stats(model, dataset)
    other = _stats(model, dataset, mode)
    assert np.isfinite(other.total_nll) and other.num_tokens == own.num_tokens
    assert other.total_nll != pytest.approx(own.total_nll, rel=1e-4)
    assert {b.eval_mode for b in model.blocks} == {"argmax"}
    if mode == "expected":
        config = {**model.get_config(), "eval_mode": "expected"}
        copy = MaskedLanguageModel.from_config(config)
        copy(np.ones((2, 6), np.int32))
        copy.set_weights(model.get_weights())
        reference = _stats(copy, dataset)
        assert other.total_nll == pytest.approx(reference.total_nll, rel=1e-6)
