"""MaskedLanguageModel: the loss over the chosen positions against a numpy reference, the
trainer's contract for a fixed architecture, and the .keras round trip."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.models.masked_lm import MaskedLanguageModel, masked_token_nll

VOCAB = 50


def _model() -> MaskedLanguageModel:
    return MaskedLanguageModel(
        vocab_size=VOCAB,
        d_model=16,
        num_heads=2,
        d_ffn=32,
        architecture="A D linear",
        attention="softmax",
    )


def _reference_loss(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean -log softmax(logits)[target] over targets != 0, in float64."""
    logits = logits.astype(np.float64)
    total, count = 0.0, 0
    for b, t in zip(*np.nonzero(targets), strict=True):
        row = logits[b, t]
        log_z = np.log(np.exp(row - row.max()).sum()) + row.max()
        total += log_z - row[targets[b, t]]
        count += 1
    return total / count


def test_the_loss_is_the_mean_nll_over_the_chosen_positions_only():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 7, VOCAB)).astype(np.float32) * 3
    targets = rng.integers(1, VOCAB, size=(3, 7)).astype(np.int32)
    targets[rng.random((3, 7)) > 0.3] = 0  # not chosen
    model = _model()
    loss = float(model.compute_loss(None, targets, logits))
    assert loss == pytest.approx(_reference_loss(logits, targets), rel=1e-5)
    nll = keras.ops.convert_to_numpy(masked_token_nll(logits, targets))
    assert not nll[targets == 0].any()
    # Changing the logits at positions not chosen changes nothing.
    other = logits.copy()
    other[targets == 0] += 5.0
    assert float(model.compute_loss(None, targets, other)) == pytest.approx(loss, rel=1e-6)


def test_a_batch_with_nothing_chosen_has_zero_loss():
    logits = np.zeros((2, 4, VOCAB), np.float32)
    assert float(_model().compute_loss(None, np.zeros((2, 4), np.int32), logits)) == 0.0


def test_the_trainer_contract_of_a_fixed_architecture():
    model = _model()
    logits = model(np.ones((2, 6), np.int32))
    assert tuple(logits.shape) == (2, 6, VOCAB)
    assert model.architecture_string() == "A D linear"
    assert model.candidate_names == ["attention", "dense", "linear"]
    np.testing.assert_array_equal(model.pi(), np.eye(3, dtype=np.float32))
    assert model.tau() is None
    model.reset_state("eval")  # no memory: nothing to do


def test_keras_round_trip(tmp_path):
    model = _model()
    tokens = np.random.default_rng(1).integers(1, VOCAB, size=(2, 9)).astype(np.int32)
    want = keras.ops.convert_to_numpy(model(tokens))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded, MaskedLanguageModel) and loaded.mlm_head
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(tokens)), want, rtol=1e-5)
