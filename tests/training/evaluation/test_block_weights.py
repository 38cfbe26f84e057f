"""Scoring a search with other block weights (an evaluator's `mode`,
`partf.training.evaluation.block_weights`): the same figures as a copy of the model built with that
eval_mode, the model's own mode left as it was, compiled evaluators of different modes
each keeping their own, and validation during a frozen pi scored by the expected mixture."""

from __future__ import annotations

from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

from partf.generation.model_helpers import reconfigure
from partf.models import MaskedLanguageModel, PARTransformerXL
from partf.training.callbacks.monitoring import ValidationCallback
from partf.training.evaluation.block_weights import expected_evaluator
from partf.training.evaluation.perplexity import Evaluator, SplitStats
from partf.training.run_state import RunProgress

VOCAB = 50


@pytest.fixture(scope="module")
def search():
    """A built search model (argmax evaluation) with distinct, non-uniform pi per block."""
    # Its own seed: the weights (and so how far apart the modes score) must not depend
    # on which tests ran before in the process.
    keras.utils.set_random_seed(0)
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


def _stats(model, dataset, mode=None, jit_compile=False):
    return Evaluator(model, jit_compile=jit_compile, mode=mode).evaluate(dataset)


def test_expected_scores_like_a_model_built_with_expected_weights(search, dataset):
    own = _stats(search, dataset)
    expected = _stats(search, dataset, "expected")
    reference = _stats(reconfigure(search, eval_mode="expected"), dataset)
    assert expected.total_nll == pytest.approx(reference.total_nll, rel=1e-6)
    assert expected.num_tokens == own.num_tokens
    # A different model from the argmax one, which the evaluator left as it was.
    # (At initialisation the modes' totals differ by about 4e-5 relative, far above the
    # 1e-6 to which equal computations agree.)
    assert expected.total_nll != pytest.approx(own.total_nll, rel=1e-5)
    assert [b.eval_mode for b in search.blocks] == ["argmax"] * 3
    assert _stats(search, dataset).total_nll == pytest.approx(own.total_nll, rel=1e-6)


@pytest.mark.compile
def test_compiled_evaluators_of_two_modes_each_keep_their_own(search, dataset):
    """Two XLA-compiled evaluators of one model, traced one after the other with
    different block weights: each scores as a model built with its weights. (Block
    weights set on the model around a call would leave a compiled function with the
    weights of its first trace.)"""
    want = {
        mode: _stats(reconfigure(search, eval_mode=mode), dataset).total_nll
        for mode in ("argmax", "expected")
    }
    assert want["argmax"] != pytest.approx(want["expected"], rel=1e-5)
    argmax = Evaluator(search, jit_compile=True, mode="argmax")
    expected = Evaluator(search, jit_compile=True, mode="expected")
    for _ in range(2):  # traced on the first pass, reused on the second
        for mode, evaluator in (("argmax", argmax), ("expected", expected)):
            got = evaluator.evaluate(dataset).total_nll
            assert got == pytest.approx(want[mode], rel=1e-5), mode
    assert {b.eval_mode for b in search.blocks} == {"argmax"}


def test_a_traced_call_keeps_the_mode_it_was_given(search):
    """One tf.function traced once per mode (the mode is a Python argument): its
    outputs follow the argument, not any setting of the model."""
    x = np.ones((2, 6), np.int32)

    @tf.function
    def hidden(mode):
        search.reset_state("eval")
        return search(x, training=False, mode=mode)

    for mode in ("argmax", "expected", "argmax"):
        copy = reconfigure(search, eval_mode=mode)
        np.testing.assert_allclose(
            np.asarray(hidden(mode)), np.asarray(copy(x, training=False)), atol=1e-5
        )


def test_an_unknown_mode_fails_when_the_evaluator_is_built(search):
    with pytest.raises(ValueError, match="unknown eval_mode 'mean'"):
        Evaluator(search, jit_compile=False, mode="mean")


def test_only_a_search_evaluated_by_argmax_gets_an_expected_evaluator(search):
    assert expected_evaluator(search, lambda mode: ("made", mode)) == ("made", "expected")
    fixed = PARTransformerXL(
        vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=32, num_layers=2, mem_len=4,
        cutoffs=(), batch_size=2, architecture="A D",
    )  # fmt: skip
    assert expected_evaluator(fixed, lambda mode: "made") is None
    sample = reconfigure(search, eval_mode="sample")
    assert expected_evaluator(sample, lambda mode: "made") is None


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
        vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=32, num_layers=2,
        candidates=("attention", "dense", "identity"), attention="softmax",
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
    assert expected_evaluator(model, lambda mode: mode) == "expected"
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
