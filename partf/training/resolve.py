"""The model config a run builds, resolved in one function: `resolve_model`.

Only here do a run's sources meet, in this order: (1) `--from_search`, the model a
finished search saved, without the options of the mechanisms its architecture dropped;
(2) the model flags given, which win over the search's; (3) the presets of the training
settings (`--search=original`, `--objective=mlm`); (4) what the data and the run know:
vocabulary size, per-replica batch rows, tau's steps, the architecture
`--drop_attention` chose, the table `--search_cost=time` measured; (5) with the data,
every option of each chosen mechanism written out (so a saved config builds the same
attentions whatever a later partf's defaults) and `position="auto"` resolved.

Without the data it answers the draft (1 to 3), which `TrainConfig.model` holds, so a
bad flag is answered before any data is read. The resolved config is the one the model
is built from and `config.json`, checkpoints and `results.json` store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from partf.attention.registry import attention_names, mechanism_option, resolve_options
from partf.errors import ConfigError
from partf.models.config import DATA_FIELDS, ModelConfig, parse_block_candidates


class FoundSearch(Protocol):
    """What `resolve_model` reads of a finished search (`partf.training.search.read_search`)."""

    model: dict[str, Any]  # the search run's model config, as its results.json stores it
    architecture: str  # the fixed architecture its pi chose


def model_error(error: Exception) -> ConfigError:
    """The ConfigError of a model setting that ModelConfig or a model refused (its
    ValueError or, for an unknown field, TypeError), as one sentence."""
    return ConfigError(str(error).rstrip(".") + ".")


def resolve_model(
    given: ModelConfig | Mapping[str, Any],
    *,
    objective: str,
    search: str,
    from_search: FoundSearch | None = None,
    vocab_size: int | None = None,
    batch_size: int | None = None,
    tau_steps: int | None = None,
    architecture: str | None = None,
    candidate_costs: Mapping[str, float] | None = None,
) -> ModelConfig:
    """The ModelConfig of a run, from every source of its settings (see the module).

    Args:
        given: the model fields the flags give (the others take the search's, a preset or
            ModelConfig's default), or a whole ModelConfig (no preset applies but the
            encoder of objective mlm): a run's draft, as `TrainConfig.model` holds it.
        objective, search: the training settings whose presets apply (`TrainConfig`'s).
        from_search: the finished search whose architecture the run trains, or None.
        vocab_size, batch_size, tau_steps: the data's vocabulary size, the rows of one
            batch the model sees, the steps of the whole run; None before the data.
        architecture: the architecture --drop_attention chose, or None (the draft's).
        candidate_costs: the measured table of --search_cost=time, or None.

    Returns:
        The draft when a data field is None; else the complete config a model is built
        from: every option of the chosen mechanisms written out, `position` resolved.

    Raises:
        ConfigError: a data field given as a model setting, or settings the model refuses
            (a cutoff not below the vocabulary size, an architecture of another depth), in
            one sentence.
    """
    whole = isinstance(given, ModelConfig)
    chosen = given.to_dict() if whole else dict(given)
    for name in DATA_FIELDS:
        if chosen.get(name) is not None:
            raise ConfigError(
                f"model field {name!r} comes from the data and the run's length; do not "
                "set it (leave it None)."
            )
    fields = {} if from_search is None else _searched_fields(from_search)
    fields.update(chosen)  # the flags given win over the search's
    if not whole:
        fields.update(dict.fromkeys(DATA_FIELDS))
        if search == "original" and objective == "causal":
            # The original's search is its shared optimizer acting on its own parameters:
            # clipped probabilities, not logits. With logits its blocks stayed undecided
            # on WikiText-2 and validation fell behind the original's from epoch 4 on
            # (docs/results.md, "The seed's table, side by side"). A value given wins.
            fields.setdefault("arch_parameterization", "probabilities")
    if objective == "mlm":
        # The bidirectional encoder: its ModelConfig records no XL memory and no
        # adaptive softmax, and refuses what an encoder cannot do.
        fields["causal"] = False
    known = {"vocab_size": vocab_size, "batch_size": batch_size, "tau_steps": tau_steps}
    fields.update({name: value for name, value in known.items() if value is not None})
    if architecture is not None:
        fields["architecture"] = architecture
    if candidate_costs is not None:
        fields["candidate_costs"] = dict(candidate_costs)
    try:
        model = ModelConfig(**fields)
        if any(value is None for value in known.values()):
            return model  # the draft: its options and position wait for the architecture
        options = resolve_options(model.attention_options, model.attention_mechanisms)
        position = model.recommended_position if model.position == "auto" else model.position
        return model.replace(attention_options=options, position=position)
    except (TypeError, ValueError) as e:  # e.g. a cutoff not below the vocabulary size
        raise model_error(e) from None


def resolve_for_run(config: Any, data: Any, rows: int, **inputs: Any) -> ModelConfig:
    """A run's model as the trainer builds it: `config`'s (a TrainConfig) draft resolved
    with its data (`vocab_size`, `total_steps`) and `rows` a batch (one replica's share);
    `inputs` are resolve_model's others (`architecture`, `candidate_costs`)."""
    return resolve_model(
        config.model,
        objective=config.objective,
        search=config.search,
        vocab_size=data.vocab_size,
        batch_size=rows,
        tau_steps=data.total_steps,
        **inputs,
    )


def _searched_fields(found: FoundSearch) -> dict[str, Any]:
    """The search's model fields for its fixed run: its architecture the one pi chose,
    without the data fields (the run's own data gives them) and without the options
    written out for a mechanism that architecture dropped (a saved config names every
    chosen mechanism's options, `<mechanism>_<option>`, and an option no chosen mechanism
    takes is refused)."""
    architecture = found.architecture
    fields = {k: v for k, v in found.model.items() if k not in DATA_FIELDS}
    fields.update(architecture=architecture, num_layers=len(architecture.split()))
    kept = {
        fields["attention"] if name == "attention" else name
        for candidates in parse_block_candidates(architecture)
        for name in candidates
    }
    dropped = [name for name in attention_names() if name not in kept]
    fields["attention_options"] = {
        key: value
        for key, value in fields["attention_options"].items()
        if not any(mechanism_option(name, key) for name in dropped)
    }
    return fields
