"""What a PAR block may hold: its candidate names and kinds, evaluation modes and the
forms of its architecture parameters (used by `StochasticBlock`, the configurations and
the encoder)."""

from __future__ import annotations

from partf.attention import attention_names, get_attention_class
from partf.attention.base import check_choice

#: Block weights at evaluation.
EVAL_MODES = ("argmax", "expected", "sample")


def check_eval_mode(mode: str) -> None:
    """Raises ValueError naming the choices when `mode` is not one of `EVAL_MODES`."""
    check_choice("eval_mode", mode, EVAL_MODES)


#: Candidate names that are not attention registry names.
BUILTIN_CANDIDATES = ("attention", "dense", "identity")

#: How a block holds its architecture parameters: "logits" (pi is their softmax) or
#: "probabilities" (the original project's clipped, unnormalised probabilities).
ARCH_PARAMETERIZATIONS = ("logits", "probabilities")

#: The original's guard against log(0) in its Gumbel-softmax.
PROBABILITY_EPSILON = 1e-5


def initial_probabilities(num_candidates: int) -> list[float]:
    """The original's starting probabilities: [0.33, 0.33, 0.34] for three candidates
    (1 / C rounded to two places, the last candidate taking the remainder)."""
    share = round(1.0 / num_candidates, 2)
    return [share] * (num_candidates - 1) + [round(1.0 - share * (num_candidates - 1), 2)]


def noncausal_attention_names() -> list[str]:
    """The registry names of the mechanisms that have a non-causal form."""
    return [name for name in attention_names() if get_attention_class(name).supports_noncausal]


def candidate_kind(name: str, attention: str) -> tuple[str, str | None]:
    """("attention", registry name) | ("dense", None) | ("identity", None).

    "attention" stands for the configured `attention`; any registry name is
    an attention of that type. Unknown names raise ValueError listing the
    valid ones.
    """
    if name == "attention":
        return "attention", attention
    if name in ("dense", "identity"):
        return name, None
    if name in attention_names():
        return "attention", name
    raise ValueError(
        f"unknown candidate {name!r}; use one of {', '.join(BUILTIN_CANDIDATES)} "
        f"or an attention name: {', '.join(attention_names())}."
    )
