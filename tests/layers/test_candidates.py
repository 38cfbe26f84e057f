"""What a PAR block may hold: candidate kinds, evaluation modes, the original's starting
probabilities and the mechanisms with a non-causal form."""

from __future__ import annotations

import pytest

from partf.attention import attention_names
from partf.layers.candidates import (
    EVAL_MODES,
    candidate_kind,
    check_eval_mode,
    initial_probabilities,
    noncausal_attention_names,
)


def test_candidate_kinds():
    """ "attention" is the configured mechanism, a registry name that mechanism itself."""
    assert candidate_kind("attention", "relative") == ("attention", "relative")
    assert candidate_kind("softmax", "relative") == ("attention", "softmax")
    assert candidate_kind("dense", "relative") == ("dense", None)
    assert candidate_kind("identity", "relative") == ("identity", None)
    with pytest.raises(ValueError) as caught:
        candidate_kind("conv", "relative")
    message = str(caught.value)
    assert message.startswith("unknown candidate 'conv'; use one of attention, dense, identity")
    assert all(name in message for name in attention_names())


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (1, [1.0]),
        (2, [0.5, 0.5]),
        (3, [0.33, 0.33, 0.34]),  # the original's
        (4, [0.25, 0.25, 0.25, 0.25]),
        (6, [0.17, 0.17, 0.17, 0.17, 0.17, 0.15]),
    ],
)
def test_initial_probabilities_round_to_two_places_the_last_taking_the_rest(count, expected):
    got = initial_probabilities(count)
    assert got == expected
    assert sum(got) == pytest.approx(1.0)


def test_check_eval_mode_names_the_choices():
    for mode in EVAL_MODES:
        check_eval_mode(mode)
    with pytest.raises(ValueError, match=r"^unknown eval_mode 'mean'; choose one of argmax, "):
        check_eval_mode("mean")


def test_noncausal_names_are_the_mechanisms_with_a_noncausal_form():
    names = noncausal_attention_names()
    assert {"softmax", "linear", "lara", "eva"} <= set(names) and "primal" not in names
