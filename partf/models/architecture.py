"""Architecture strings: the block tokens of `--architecture` ('A D norm D', searched
blocks 'A|I', presets such as 'transnormer') and their parsing into candidate names.

Example:
    >>> parse_block_candidates("A|I D norm")
    (('attention', 'identity'), ('dense',), ('norm',))
"""

from __future__ import annotations

from partf.attention import attention_names
from partf.layers.candidates import BUILTIN_CANDIDATES

#: Single-letter architecture tokens.
ARCHITECTURE_LETTERS = {"A": "attention", "D": "dense", "I": "identity"}
_LETTER_OF = {name: letter for letter, name in ARCHITECTURE_LETTERS.items()}


def _alternating(num_layers: int, preset: str, attention_at) -> str:
    """Blocks 0, 2, 4, ... attention (`attention_at(i)` names it), the others dense."""
    if num_layers < 2 or num_layers % 2:
        raise ValueError(
            f"architecture preset {preset!r} pairs each attention block with a dense one, so "
            f"num_layers must be even, got {num_layers}; e.g. --num_layers=6."
        )
    return " ".join(attention_at(i) if i % 2 == 0 else "D" for i in range(num_layers))


#: Named layouts for `--architecture`: name -> (num_layers -> architecture string). A
#: preset name must not be an attention name ("primal" is one block of Primal attention).
ARCHITECTURE_PRESETS = {
    # Transformer-XL's plain stack: the configured attention, then a dense block.
    "plain": lambda n: _alternating(n, "plain", lambda i: "A"),
    # TransNormer (Qin et al. 2022): DiagAttention in the first half of the stack,
    # NormAttention in the second, each followed by a dense block.
    "transnormer": lambda n: _alternating(
        n, "transnormer", lambda i: "diag" if i < n / 2 else "norm"
    ),
    # Primal's hybrid language model (Chen et al. 2023): softmax attention in the first
    # blocks and Primal attention in the last, dense blocks between (the seed's 6-layer
    # model: 5 softmax layers and 1 Primal layer).
    "primal_hybrid": lambda n: _alternating(
        n, "primal_hybrid", lambda i: "primal" if i == n - 2 else "softmax"
    ),
}


def expand_architecture(architecture: str, num_layers: int) -> str:
    """A preset name's architecture string for `num_layers` blocks; others unchanged.

    Example:
        >>> expand_architecture("transnormer", 8)
        'diag D diag D norm D norm D'
    """
    preset = ARCHITECTURE_PRESETS.get(architecture.strip().lower())
    return architecture if preset is None else preset(num_layers)


def _block_name(token: str) -> str:
    """One block token ('A', 'dense', 'norm', ...) as its candidate name; unknown raises."""
    name = ARCHITECTURE_LETTERS.get(token.upper(), token) if len(token) == 1 else token
    if name not in BUILTIN_CANDIDATES and name not in attention_names():
        raise ValueError(
            f"unknown architecture token {token!r}; use A, D, I or an attention name: "
            f"{', '.join(attention_names())}."
        )
    return name


def parse_block_candidates(architecture: str) -> tuple[tuple[str, ...], ...]:
    """'A|I D|I norm' -> (('attention', 'identity'), ('dense', 'identity'), ('norm',)).

    A block token is one candidate (a fixed block) or several joined by '|' (a block that
    searches among them, each with its own architecture logits). Tokens are those of
    `parse_architecture`; blocks are separated by spaces or commas.
    """
    blocks = architecture.replace(",", " ").split()
    if not blocks:
        raise ValueError("architecture is empty; give block tokens such as 'A A D D D I'.")
    parsed = []
    for block in blocks:
        names = tuple(_block_name(token) for token in block.split("|"))
        if len(set(names)) != len(names) or "" in block.split("|"):
            raise ValueError(
                f"architecture block {block!r} names a candidate twice or none; write each "
                "once, e.g. 'A|I'."
            )
        parsed.append(names)
    return tuple(parsed)


def parse_architecture(architecture: str) -> tuple[str, ...]:
    """'A A D I' (or 'A,A,D,I') -> ('attention', 'attention', 'dense', 'identity').

    Tokens: A (the configured attention), D (dense), I (identity), the full
    names, or an attention registry name. Unknown tokens, and searched blocks ('A|I':
    see `parse_block_candidates`), raise ValueError.
    """
    blocks = parse_block_candidates(architecture)
    searched = [i for i, names in enumerate(blocks) if len(names) > 1]
    if searched:
        raise ValueError(
            f"architecture {architecture!r} searches block {searched[0]} (a '|' token); a "
            "fixed architecture names one candidate per block."
        )
    return tuple(names[0] for names in blocks)


def is_searched_architecture(architecture: str | None) -> bool:
    """Whether an architecture string has a searched block ('A|I'), so that a model
    with it is a search, not a fixed model."""
    return architecture is not None and "|" in architecture


def architecture_token(name: str) -> str:
    """'attention' -> 'A', 'dense' -> 'D', 'identity' -> 'I', others unchanged."""
    return _LETTER_OF.get(name, name)
