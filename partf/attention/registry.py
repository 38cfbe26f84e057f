"""Name -> attention class, so configs and command lines name mechanisms by string.

Each mechanism module declares its class with
`@register_attention("name", position="rotary")`: its name, that it is saved in
`.keras` files, and the position encoding `position="auto"` gives it. The registry
finds the module of each name in those declarations, read from the source without
importing it (`partf.declarations`), so a name is looked up without importing every
mechanism first, and a new module is all a new mechanism needs.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from partf.attention.base import Attention
from partf.declarations import declared
from partf.serialization import register

#: The position encodings of a model (`ModelConfig.position` adds "auto": the one its
#: mechanisms ask for, each in its `register_attention`).
POSITIONS = ("none", "sinusoidal", "learned", "rotary")

_REGISTRY: dict[str, type[Attention]] = {}


def register_attention(name: str, *, position: str = "none"):
    """Class decorator: registers an `Attention` subclass under `name`, with `position`
    the encoding `position="auto"` gives it: the best of those measured for it
    (benchmarks/positions.py, README "Positions"), rotary where it was at least as good as
    none; relative attention keeps its own encoding ("none").

    It also registers the class as Keras-serializable (package `partf`). Write the name
    as a literal: `partf.declarations` reads it from the source.
    """

    def decorator(cls: type[Attention]) -> type[Attention]:
        if not issubclass(cls, Attention):
            raise TypeError(f"{cls.__name__} must subclass partf.attention.Attention.")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"attention name {name!r} is already registered.")
        if position not in POSITIONS or (position == "rotary" and not cls.supports_rotary):
            raise ValueError(f"{name} attention cannot recommend position {position!r}.")
        cls.registry_name = name
        cls.recommended_position = position
        _REGISTRY[name] = register(cls)
        return cls

    return decorator


def attention_names() -> list[str]:
    """All attention names, registered or declared."""
    return sorted(set(declared().mechanisms) | set(_REGISTRY))


def builtin_attention_names() -> list[str]:
    """The mechanisms declared in partf's source, without those registered by user code
    or tests (those partf-train's flags cover, `partf.cli.settings_source`)."""
    return sorted(declared().mechanisms)


def get_attention_class(name: str) -> type[Attention]:
    """The class registered as `name`; unknown names list the valid ones."""
    mechanisms = declared().mechanisms
    if name not in _REGISTRY and name in mechanisms:
        importlib.import_module(mechanisms[name])
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown attention {name!r}; valid names: {', '.join(attention_names())}."
        )
    return _REGISTRY[name]


#: Constructor arguments every mechanism takes besides its `options`.
COMMON_ARGUMENTS = frozenset({"head_dim", "dropout_rate", "use_bias", "name", "dtype"})


def mechanism_option(name: str, key: str) -> str | None:
    """The option of mechanism `name` that `key` sets for it alone, or None.

    `<mechanism>_<option>` (e.g. "eva_window_size") sets `option` for that mechanism
    only, next to the shared "window_size" that every mechanism taking it reads.
    """
    prefix = f"{name}_"
    if not key.startswith(prefix):
        return None
    option = key[len(prefix) :]
    return option if option in get_attention_class(name).options else None


#: Options a block gives its attentions from the config's own fields (mem_len, clamp_len,
#: dropout_rate): they are not attention options to resolve.
BLOCK_ARGUMENTS = frozenset({"mem_len", "clamp_len", "dropout_rate"})


def resolve_options(options: dict[str, Any], mechanisms: Sequence[str]) -> dict[str, Any]:
    """Attention options with every option of each mechanism written out.

    Each option of each mechanism in `mechanisms` is stored as `<mechanism>_<option>`:
    the mechanism's own value if set, else the shared `<option>` if set, else its
    default. A config holding the result builds the same attentions whatever the
    defaults of a later partf (a change of default makes a new format, and the saved
    file says which it has). The options given are kept, so that a stray one can still
    be reported.

    Example:
        >>> resolve_options({"window_size": 8}, ["diag"])["diag_diag_activation"]
        'relu'
        >>> resolve_options({}, ["local"])
        {'local_window_size': 128}
    """
    resolved = dict(options)
    for name in mechanisms:
        for option, (default, _) in get_attention_class(name).options.items():
            own = f"{name}_{option}"
            if option not in BLOCK_ARGUMENTS and own not in resolved:
                resolved[own] = options.get(option, default)
    return resolved


def create_attention(
    name: str, /, d_model: int, num_heads: int, causal: bool = True, **kwargs: Any
) -> Attention:
    """Builds attention `name`.

    Options it does not take are ignored, so one set of `--attn_*` flags can serve a
    mix of mechanisms; `<name>_<option>` sets an option for this mechanism alone and
    wins over the shared `<option>` (`eva_window_size=64` next to `window_size=32`).
    `rotary=True` is passed to mechanisms that support it, left out for those that
    encode positions themselves (relative attention), and a ValueError for the others
    (Fastformer, Primal), as is an option value the mechanism rejects. (`name` is
    positional-only, so `name=` in kwargs names the layer.)
    """
    cls = get_attention_class(name)
    accepted = set(cls.options) | COMMON_ARGUMENTS
    chosen = {key: value for key, value in kwargs.items() if key in accepted}
    for key, value in kwargs.items():
        option = mechanism_option(name, key)
        if option is not None:
            chosen[option] = value
    if kwargs.get("rotary"):
        if cls.supports_rotary:
            chosen["rotary"] = True
        elif not cls.encodes_positions:
            raise ValueError(
                f"rotary positions are not defined for {name} attention (no query-key dot "
                "product to rotate); use position sinusoidal, learned or none with it."
            )
    return cls(d_model=d_model, num_heads=num_heads, causal=causal, **chosen)
