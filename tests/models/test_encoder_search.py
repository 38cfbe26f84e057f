"""PAR search in the Encoder: non-causal stochastic blocks, pi, tau and the found architecture."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.models import Encoder
from tests.attention.helpers import to_np
from tests.models.test_encoder import VOCAB, small, tokens_with_padding

CANDIDATES = ("softmax", "dense", "identity")


def search(**overrides) -> Encoder:
    settings = dict(candidates=CANDIDATES, architecture=None, num_layers=4, num_classes=3, seed=0)
    settings.update(overrides)
    return small(**settings)


def choose(model: Encoder, chosen: list[int], margin: float = 40.0) -> None:
    """Sets each block's logits so that candidate chosen[i] has pi = 1 in float32."""
    for block, index in zip(model.blocks, chosen, strict=True):
        logits = np.zeros(block.num_candidates, "float32")
        logits[index] = margin
        block.arch_logits.assign(logits)


def copy_chosen_weights(search_model: Encoder, fixed: Encoder, chosen: list[int]) -> None:
    """The fixed encoder gets the search's embedding, chosen candidates and head."""
    for name in ("embedding", "classifier_hidden", "classifier"):
        getattr(fixed, name).set_weights(getattr(search_model, name).get_weights())
    for i, (block, index) in enumerate(zip(search_model.blocks, chosen, strict=True)):
        if block.sublayers[index] is not None:
            fixed.blocks[i].sublayers[0].set_weights(block.sublayers[index].get_weights())
            fixed.blocks[i].norms[0].set_weights(block.norms[index].get_weights())


@pytest.mark.parametrize("eval_mode", ["argmax", "expected"])
def test_search_with_decided_pi_equals_the_fixed_encoder(eval_mode):
    """pi one-hot (expected weights) or the argmax architecture: the search's output is
    the fixed encoder's of `architecture_string()`, given the same weights."""
    model = search(eval_mode=eval_mode)
    tokens = tokens_with_padding()
    model(tokens)
    chosen = [0, 1, 0, 2]
    choose(model, chosen)
    assert model.architecture_string() == "softmax D softmax I"
    np.testing.assert_allclose(model.pi(), np.eye(3)[chosen], atol=1e-6)
    fixed = small(architecture=model.architecture_string(), num_classes=3)
    fixed(tokens)
    copy_chosen_weights(model, fixed, chosen)
    np.testing.assert_allclose(to_np(model(tokens)), to_np(fixed(tokens)), rtol=1e-5, atol=1e-5)
    assert fixed.candidate_names == ["softmax", "dense", "identity"]
    np.testing.assert_allclose(fixed.pi(), np.eye(3)[chosen])
    assert fixed.architecture_string() == model.architecture_string()


def test_noncausal_candidates_see_later_tokens_and_ignore_pads():
    """Mixed non-causal mechanisms in every block: a later token changes the first
    token's state, and what the pads hold changes nothing at real tokens."""
    model = search(
        candidates=("linear", "eva", "local", "dense"), num_classes=0, eval_mode="expected",
        attention_options={"window_size": 2, "chunk_size": 2},
    )  # fmt: skip
    assert all(not a.causal for block in model.blocks for _, a in block.attentions())
    tokens = tokens_with_padding()
    mask = tokens != 0
    hidden = to_np(model({"tokens": tokens, "mask": mask}))
    changed = tokens.copy()
    changed[1, -1] = tokens[1, -1] % (VOCAB - 1) + 1
    assert not np.allclose(to_np(model(changed))[1, 0], hidden[1, 0], atol=1e-5)
    other = np.where(mask, tokens, 5).astype("int32")
    hidden_other = to_np(model({"tokens": other, "mask": mask}))
    np.testing.assert_allclose(hidden_other[mask], hidden[mask], rtol=1e-4, atol=1e-4)


def test_fit_anneals_tau_trains_pi_and_round_trips(tmp_path):
    """Plain fit: the step counter drives tau to tau_end, the architecture logits learn,
    and a .keras file restores the config, the logits, the step and the outputs."""
    model = search(tau_steps=2, tau_start=2.0, tau_end=0.5, position="learned")
    assert len(model.arch_variables) == 4 and float(model.tau()) == pytest.approx(2.0)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
    )
    tokens = np.concatenate([tokens_with_padding(0), tokens_with_padding(1)])
    model.fit(tokens, np.array([0, 1, 2, 1]), batch_size=2, epochs=1, verbose=0)
    assert int(model.step.numpy()) == 2 and float(model.tau()) == pytest.approx(0.5)
    assert not np.allclose(model.pi(), 1 / 3)
    path = tmp_path / "search.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    assert loaded.architecture_string() == model.architecture_string()
    np.testing.assert_allclose(loaded.pi(), model.pi())
    assert int(loaded.step.numpy()) == 2
    np.testing.assert_allclose(to_np(loaded(tokens)), to_np(model(tokens)), rtol=1e-5, atol=1e-5)


def test_search_refusals_are_one_line():
    with pytest.raises(ValueError, match="causal only and cannot be used in an Encoder") as e:
        search(candidates=("softmax", "primal", "dense"))
    assert "\n" not in str(e.value) and "linear" in str(e.value)
    with pytest.raises(ValueError, match="unknown candidate 'conv'"):
        search(candidates=("conv", "dense"))
    with pytest.raises(ValueError, match="candidates is empty"):
        search(candidates=())
    with pytest.raises(ValueError, match="no temperature"):
        small().tau()


def test_the_config_s_arch_parameterization_reaches_the_blocks():
    """An encoder built from a ModelConfig keeps the config's architecture parameters
    (here the original's clipped probabilities), as the causal model does."""
    plain = search()
    config = plain.config.replace(arch_parameterization="probabilities")
    model = Encoder(config=config, num_classes=3, seed=0)
    assert {b.settings.arch_parameterization for b in plain.blocks} == {"logits"}
    assert {b.settings.arch_parameterization for b in model.blocks} == {"probabilities"}
    assert model.config.arch_parameterization == "probabilities"
