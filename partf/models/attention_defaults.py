"""Generations of partf's attention defaults: what attention options left unset mean.

partf's attention defaults have changed over time (to the seed authors' released
configurations, then EVA's chunk mask to the authors'). A `ModelConfig` names the
generation it was built with (`attention_defaults`), so a checkpoint or `.keras` file
keeps the meaning it was trained with: a configuration of an earlier generation gets
that generation's values written into its attention options (`pin_previous_defaults`).

A new change of an attention default adds a generation at the end of
`ATTENTION_GENERATIONS` and, in the mechanism, the option's earlier value under the
generation before it (`Attention.generation_defaults`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from partf.attention import get_attention_class

#: The generations of partf's attention defaults, oldest first: what attention options
#: left unset meant at each time. "partf_v1": partf's own (each mechanism's
#: `previous_defaults`); "authors_v1": the seed authors' released configurations (e.g.
#: TransNormer's transnormer_t1), EVA's chunk mask still partf's; "authors_v2": EVA's
#: causal chunk mask the authors' too. A mechanism lists what an option meant in an
#: earlier generation (`generation_defaults`); the last generation is today's defaults.
ATTENTION_GENERATIONS = ("partf_v1", "authors_v1", "authors_v2")

#: The values of `ModelConfig.attention_defaults`: "authors" (the newest generation;
#: a config stores the generation's own name, so that it keeps its meaning when a later
#: generation comes) or a generation by name.
ATTENTION_DEFAULTS = ("authors", *reversed(ATTENTION_GENERATIONS))


def generation_defaults(cls: type, generation: str) -> dict[str, Any]:
    """What leaving each option of attention class `cls` unset meant in `generation`
    (one of `ATTENTION_GENERATIONS`), for the options whose default changed since: the
    value listed for the earliest generation from `generation` on that lists the option.

    Example:
        >>> generation_defaults(get_attention_class("eva"), "authors_v1")
        {'chunk_mask': 'partf'}
    """
    values: dict[str, Any] = {}
    later = ATTENTION_GENERATIONS[ATTENTION_GENERATIONS.index(generation) :]
    for name in reversed(later):  # the earlier generation's value wins
        first = name == ATTENTION_GENERATIONS[0]
        values.update(cls.previous_defaults if first else cls.generation_defaults.get(name, {}))
    return values


def pin_previous_defaults(
    options: dict[str, Any], mechanisms: Sequence[str], generation: str = "partf_v1"
) -> dict[str, Any]:
    """Attention options with each mechanism's defaults of `generation` written out.

    An option left unset whose default has changed since `generation` gets its value of
    then as `<mechanism>_<option>`, so a model of that generation
    (--attention_defaults) is built as partf built it then; options set (shared or for
    the mechanism alone) are kept.

    Example:
        >>> pin_previous_defaults({"window_size": 8}, ["diag"])["diag_diag_activation"]
        'softmax'
        >>> pin_previous_defaults({}, ["diag", "eva"], "authors_v1")
        {'eva_chunk_mask': 'partf'}
    """
    pinned = dict(options)
    for name in mechanisms:
        cls = get_attention_class(name)
        for option, value in generation_defaults(cls, generation).items():
            own = f"{name}_{option}"
            if option in pinned or own in pinned or cls.options[option][0] == value:
                continue
            pinned[own] = value
    return pinned
