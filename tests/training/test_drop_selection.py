"""partf.training.drop_selection (`--drop_attention`, `--drop_attention_to`): the
training-free drop (or replacement by a linear attention) chosen by the validation loss,
each score checked against the loss computed block by block here, of a model built here.
The source run and the split come from tests/training/conftest.py."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import keras
import numpy as np
import pytest

from partf.run_folder import SELECTION_FILE
from partf.serialization import FormatError
from partf.training.config import ConfigError, TrainConfig
from partf.training.drop_selection import (
    read_selection,
    select_dropped,
    write_selection,
)
from partf.training.init_from import init_weights
from partf.training.trainer import drop_selection
from tests.training.helpers import BATCH, SIZES, VOCAB, build, resolved


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


def replaced(block: int, mechanism: str) -> str:
    """The source's architecture with attention block `block` run by `mechanism`."""
    tokens = ["A", "D", "A", "D"]
    tokens[block] = mechanism
    return " ".join(tokens)


def converted_loss(folder, split, architecture: str, seed: int, **changes) -> float:
    """The loss of the conversion built here: the model of `architecture` (and the model
    settings `changes`), its weights drawn from `seed` and then copied from the source by
    init_weights."""
    model = build(architecture, seed=seed, **changes)
    init_weights(model, folder)
    return direct_loss(model, split, None)


@pytest.fixture(scope="module")
def norm_selection(source, valid_split):
    _, folder = source
    return select_dropped(folder, 1, valid_split, jit_compile=False, mechanism="norm", seed=7)


def test_the_norm_scores_are_the_converted_models_losses(source, valid_split, norm_selection):
    """--drop_attention_to=norm: each score is the validation loss of the source with that
    attention block alone run by norm attention, weights copied as --init_from copies
    them; the block replaced is the one whose score is lowest."""
    model, folder = source
    selection = norm_selection
    assert selection.mechanism == "norm"
    assert sorted(selection.losses) == [0, 2]
    for block, loss in selection.losses.items():
        want = converted_loss(folder, valid_split, replaced(block, "norm"), seed=7)
        assert loss == pytest.approx(want, rel=1e-5)
        # Norm attention ran there: neither the source's loss nor the identity's.
        assert loss != pytest.approx(direct_loss(model, valid_split, block), rel=1e-4)
        assert loss != pytest.approx(selection.baseline_loss, rel=1e-4)
    assert selection.baseline_loss == pytest.approx(direct_loss(model, valid_split, None), 1e-5)
    best = min(selection.losses, key=selection.losses.get)
    assert selection.dropped == (best,)
    assert selection.architecture == replaced(best, "norm")
    with pytest.raises(ConfigError, match="has 2 attention blocks other than norm; give 1 to 2"):
        select_dropped(folder, 3, valid_split, jit_compile=False, mechanism="norm")


def test_fresh_weights_of_the_mechanism_come_from_the_seed(source, valid_split, caplog):
    """Fastformer's own weights (its pooling vectors, its transform) are not copied: they
    are drawn from the run's seed, so the scores are those of the model built here with
    that seed, the same every time, and another seed scores otherwise. The log line of
    the scores names the mechanism."""
    _, folder = source
    with caplog.at_level(logging.INFO, logger="partf.training"):
        first = select_dropped(folder, 1, valid_split, False, mechanism="fastformer", seed=3)
    assert f"block 0 as fastformer {first.losses[0]:.4f}" in caplog.text
    assert f"replacing block(s) {first.dropped[0]} by fastformer: " in caplog.text
    again = select_dropped(folder, 1, valid_split, False, mechanism="fastformer", seed=3)
    other = select_dropped(folder, 1, valid_split, False, mechanism="fastformer", seed=4)
    assert first.losses == again.losses
    assert first.losses[0] != other.losses[0]
    want = converted_loss(folder, valid_split, replaced(0, "fastformer"), seed=3)
    assert first.losses[0] == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("flag", ["local_window_size", "window_size"])
def test_the_replacing_mechanism_takes_the_runs_options(source, valid_split, flag):
    """--drop_attention_to=local --attn_local_window_size=2 (or the shared
    --attn_window_size=2): the source holds no sliding-window option, and each variant
    scored has the run's window of 2 tokens, not the default of 128, which sees the whole
    of these short segments and their memory and so scores otherwise."""
    _, folder = source
    options = {flag: 2}
    selection = select_dropped(folder, 1, valid_split, False, "local", 5, options)
    window = {"attention_options": {"local_window_size": 2}}
    for block, loss in selection.losses.items():
        architecture = replaced(block, "local")
        want = converted_loss(folder, valid_split, architecture, seed=5, **window)
        assert loss == pytest.approx(want, rel=1e-5)
        default = converted_loss(folder, valid_split, architecture, seed=5)
        assert loss != pytest.approx(default, rel=1e-4)


def run_config(folder, mechanism: str = "norm", count: int = 1) -> TrainConfig:
    """A --drop_attention run of the source's sizes from `folder`."""
    model = {k: v for k, v in SIZES.items() if k != "vocab_size"}
    return TrainConfig(
        init_from=str(folder),
        drop_attention=count,
        drop_attention_to=mechanism,
        jit_compile=False,
        model={**model, "num_layers": 4},
    )


def test_the_run_has_norm_where_it_was_chosen_and_resumes_into_it(
    tmp_path, source, valid_split, norm_selection
):
    """The run's model has norm attention at the block chosen and the source's attention
    elsewhere; a resume reads selection.json (no split needed) when it asks for the same
    mechanism and is refused in one line when it asks for another."""
    _, folder = source
    data = SimpleNamespace(valid=valid_split, vocab_size=VOCAB, total_steps=10)
    config = run_config(folder)
    selection = drop_selection(config, data, tmp_path)
    assert selection == norm_selection
    model_config = resolved(config, data, BATCH, architecture=selection.architecture)
    mechanisms = [names[0] for names in model_config.block_candidates]
    (best,) = selection.dropped
    source_blocks = ["attention", "dense", "attention", "dense"]
    assert mechanisms == ["norm" if b == best else n for b, n in enumerate(source_blocks)]

    write_selection(tmp_path, selection)
    assert read_selection(tmp_path).mechanism == "norm"
    data.valid = None  # a resume scores nothing
    assert drop_selection(config, data, tmp_path) == selection
    with pytest.raises(ConfigError) as refused:
        drop_selection(run_config(folder, "identity"), data, tmp_path)
    message = str(refused.value)
    assert "\n" not in message
    assert f"{SELECTION_FILE} replaced the blocks by norm, but this run asks " in message
    assert "--drop_attention_to=identity; resume it with --drop_attention_to=norm" in message


def test_a_selection_file_from_before_the_format_is_refused(tmp_path):
    """selection.json files written before the format key (some without the mechanism)
    are refused in one line: the run chooses anew with --overwrite."""
    values = {
        "source": "x",
        "architecture": "I D A D",
        "dropped": [0],
        "baseline_loss": 4.0,
        "losses": {"0": 4.1, "2": 4.2},
    }
    (tmp_path / SELECTION_FILE).write_text(json.dumps(values))
    with pytest.raises(FormatError) as refused:
        read_selection(tmp_path, "identity")
    message = str(refused.value)
    assert "earlier partf (selection format none; this partf reads selection format 1)" in message
    assert "--overwrite" in message and "\n" not in message


def test_a_bad_mechanism_is_refused_in_one_line():
    with pytest.raises(ConfigError) as refused:
        TrainConfig(init_from="x", drop_attention=1, drop_attention_to="nrom")
    message = str(refused.value)
    assert message.startswith("unknown --drop_attention_to 'nrom'; valid: identity, ")
    assert " norm, " in message and "\n" not in message
    with pytest.raises(ConfigError, match="give it with --drop_attention=N"):
        TrainConfig(init_from="x", drop_attention_to="norm")


def test_a_mechanism_without_a_causal_form_is_refused(source, valid_split):
    _, folder = source
    with pytest.raises(ConfigError, match="--drop_attention_to=lara has no causal form"):
        select_dropped(folder, 1, valid_split, jit_compile=False, mechanism="lara")
