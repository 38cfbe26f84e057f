"""Generations of partf's attention defaults: what attention options left unset mean.

partf's attention defaults have changed over time (to the seed authors' released
configurations, then EVA's chunk mask to the authors'). A `ModelConfig` names the
generation it was built with (`attention_defaults`), so a checkpoint or `.keras` file
keeps the meaning it was trained with: every option of its mechanisms is written into its
attention options with the generation's value where it sets none (`resolve_options`).

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


#: Options a block gives its attentions from the config's own fields (mem_len, clamp_len,
#: dropout_rate): they are not attention options to resolve.
BLOCK_ARGUMENTS = frozenset({"mem_len", "clamp_len", "dropout_rate"})


def resolve_options(
    options: dict[str, Any], mechanisms: Sequence[str], generation: str
) -> dict[str, Any]:
    """Attention options with every option of each mechanism written out.

    Each option of each mechanism in `mechanisms` is stored as `<mechanism>_<option>`:
    the mechanism's own value if set, else the shared `<option>` if set, else what
    leaving it unset meant in `generation` (its default then). A config holding the
    result builds the same attentions whatever the defaults of a later partf, so the
    generation (--attention_defaults) is a preset used once, when the config is made.
    The options given are kept, so that a stray one can still be reported.

    Example:
        >>> resolve_options({"window_size": 8}, ["diag"], "partf_v1")["diag_diag_activation"]
        'softmax'
        >>> resolve_options({}, ["local"], "authors_v2")
        {'local_window_size': 128}
    """
    resolved = dict(options)
    for name in mechanisms:
        cls = get_attention_class(name)
        preset = generation_defaults(cls, generation)
        for option, (default, _) in cls.options.items():
            own = f"{name}_{option}"
            if option not in BLOCK_ARGUMENTS and own not in resolved:
                resolved[own] = options.get(option, preset.get(option, default))
    return resolved
