"""partf.training.drop_selection (`--drop_attention`): the training-free drop chosen by
the validation loss, each score checked against the loss computed block by block here.
The source run and the split come from tests/training/conftest.py."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.training.config import ConfigError
from partf.training.drop_selection import select_dropped
from tests.training.helpers import BATCH


def direct_loss(model, split, skip: int | None) -> float:
    """Mean loss per token over the split, memory carried, computed here block by block
    with block `skip` left out: the selection's score, written independently."""
    states = model.backbone.initial_state(BATCH)
    total, count = 0.0, 0
    for inputs, targets in split.dataset:
        x = model.embedding(inputs) * np.sqrt(model.config.d_model).astype("float32")
        new_states = []
        for b, (block, state) in enumerate(zip(model.blocks, states, strict=True)):
            y, state = block(x, states=state, mask=inputs != 0, training=False)
            new_states.append(state)
            if b != skip:
                x = y
        states = new_states
        nll = keras.ops.convert_to_numpy(model.token_nll(x, targets))
        total += float(nll.astype(np.float64).sum())
        count += nll.size
    return total / count


def test_the_drop_scores_are_the_validation_losses(source, valid_split):
    """Each score is the validation loss with that attention block alone replaced by the
    identity; the blocks dropped are those whose scores are lowest."""
    model, folder = source
    selection = select_dropped(folder, 1, valid_split, jit_compile=False)
    assert sorted(selection.losses) == [0, 2]
    for block, loss in selection.losses.items():
        assert loss == pytest.approx(direct_loss(model, valid_split, block), rel=1e-5)
    assert selection.baseline_loss == pytest.approx(direct_loss(model, valid_split, None), 1e-5)
    best = min(selection.losses, key=selection.losses.get)
    assert selection.dropped == (best,)
    tokens = ["A", "D", "A", "D"]
    tokens[best] = "I"
    assert selection.architecture == " ".join(tokens)
    with pytest.raises(ConfigError, match="has 2 attention blocks; give 1 to 2"):
        select_dropped(folder, 3, valid_split, jit_compile=False)
