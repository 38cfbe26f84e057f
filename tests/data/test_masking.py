"""BERT masking (partf.data.masking): the 15% and 80/10/10 rates, pads never chosen, the
same masks for the same seed, fresh masks per training step, resumable by step."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from partf.data.masking import Masking, mask_tokens

MASK_ID, VOCAB = 5, 1000


def _tokens(rows: int = 256, length: int = 512, pads: int = 64) -> np.ndarray:
    tokens = np.random.default_rng(0).integers(1, VOCAB, size=(rows, length)).astype(np.int32)
    tokens[tokens == MASK_ID] = 7  # real text never holds the mask
    tokens[:, length - pads :] = 0  # a padded tail
    return tokens


def test_rates_on_a_large_sample():
    tokens = _tokens()
    inputs, targets = (t.numpy() for t in mask_tokens(tokens, (3, 4), MASK_ID, VOCAB))
    real = tokens != 0
    chosen = targets != 0
    n = chosen.sum()
    # 114,688 real tokens: binomial standard errors are about 0.1% of the rate here.
    assert chosen.sum() / real.sum() == pytest.approx(0.15, abs=0.005)
    assert (inputs[chosen] == MASK_ID).sum() / n == pytest.approx(0.8, abs=0.01)
    replaced = (inputs[chosen] != MASK_ID) & (inputs[chosen] != tokens[chosen])
    # A random token equals the original 1 time in 998: it then counts as kept.
    assert replaced.sum() / n == pytest.approx(0.1 * 997 / 998, abs=0.01)
    assert (inputs[chosen] == tokens[chosen]).sum() / n == pytest.approx(0.1, abs=0.01)
    # Targets are the originals at the chosen positions; nothing else changes.
    np.testing.assert_array_equal(targets[chosen], tokens[chosen])
    np.testing.assert_array_equal(inputs[~chosen], tokens[~chosen])
    # Random replacements are real ids other than the mask.
    random_ids = inputs[chosen & (inputs != MASK_ID)]
    assert random_ids.min() >= 1 and random_ids.max() < VOCAB


def test_pads_are_never_chosen_nor_changed():
    tokens = _tokens(rows=64, length=128, pads=100)
    inputs, targets = (t.numpy() for t in mask_tokens(tokens, (0, 0), MASK_ID, VOCAB, rate=0.9))
    assert not targets[tokens == 0].any()
    assert not inputs[tokens == 0].any()


def test_the_same_seed_gives_the_same_masks_and_another_seed_others():
    tokens = _tokens(rows=8, length=64, pads=0)
    first = [t.numpy() for t in mask_tokens(tokens, (1, 2), MASK_ID, VOCAB)]
    again = [t.numpy() for t in mask_tokens(tokens, (1, 2), MASK_ID, VOCAB)]
    other = [t.numpy() for t in mask_tokens(tokens, (1, 3), MASK_ID, VOCAB)]
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert (first[1] != other[1]).any()


def _masked(dataset: tf.data.Dataset) -> list[np.ndarray]:
    return [x.numpy() for x, _ in dataset]


def test_training_masks_follow_the_global_step():
    tokens = _tokens(rows=4, length=32, pads=0)
    batches = tf.data.Dataset.from_tensor_slices((np.stack([tokens] * 6), np.stack([tokens] * 6)))
    masking = Masking(MASK_ID, VOCAB, seed=11)
    whole = _masked(masking.training_batches(batches, first_step=0))
    # The same batch at different steps is masked differently.
    assert (whole[0] != whole[1]).any()
    # A run resumed at step 4 masks its batches as the whole run did.
    resumed = _masked(masking.training_batches(batches.skip(4), first_step=4))
    for a, b in zip(whole[4:], resumed, strict=True):
        np.testing.assert_array_equal(a, b)
    # Another --seed, other masks.
    other = _masked(Masking(MASK_ID, VOCAB, seed=12).training_batches(batches, first_step=0))
    assert (whole[0] != other[0]).any()


def test_evaluation_masks_are_fixed_per_split_whatever_the_seed():
    tokens = _tokens(rows=4, length=32, pads=0)
    batches = tf.data.Dataset.from_tensor_slices((np.stack([tokens] * 2), np.stack([tokens] * 2)))
    valid = [
        _masked(Masking(MASK_ID, VOCAB, seed=s).evaluation_batches(batches, "valid"))
        for s in (0, 9)
    ]
    for a, b in zip(*valid, strict=True):
        np.testing.assert_array_equal(a, b)
    test = _masked(Masking(MASK_ID, VOCAB).evaluation_batches(batches, "test"))
    assert (valid[0][0] != test[0]).any()


def test_a_mask_id_outside_the_vocabulary_is_refused():
    with pytest.raises(ValueError, match="mask_id"):
        mask_tokens(np.ones((1, 4), np.int32), (0, 0), mask_id=VOCAB, vocab_size=VOCAB)
