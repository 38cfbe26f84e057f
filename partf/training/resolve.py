"""The model config a run builds, resolved in one call: `resolve_model`.

A run's model comes from four sources, and only here do they meet:

- the flags, with the presets of the training settings (`--search=original` takes the
  original's clipped probabilities, `--objective=mlm` the bidirectional encoder): the
  draft `TrainConfig.model`, made and checked with the TrainConfig, before any data is
  read, so that a bad flag is answered at once;
- `--drop_attention`: the architecture chosen by scoring the `--init_from` run
  (`partf.training.drop_selection`), which replaces the draft's;
- `--search_cost=time`: the measured table of what each candidate costs
  (`partf.training.cost_table`), which the model's loss charges;
- the data: the vocabulary size, the rows of one (per-replica) batch, and the steps in
  all that tau anneals over.

The trainer computes the side-effecting parts (the drop selection, the cost table)
first and passes them in; `build_model` builds the config returned, and that config is
the one `config.json`, checkpoints and `results.json` store (beside the training
settings, which do not repeat it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from partf.models.config import ModelConfig
from partf.training.config import TrainConfig, model_error

if TYPE_CHECKING:
    import tensorflow as tf

    from partf.training.splits import RunData


def batch_rows(data: RunData, strategy: tf.distribute.Strategy | None) -> int:
    """The rows of the batch one model sees: the data's, or under a strategy one
    replica's share (the model's memory state has that many rows)."""
    rows = data.train.batch_size
    if strategy is not None:
        from partf.training.distribution import per_replica_batch

        rows = per_replica_batch(strategy, rows)
    return rows


def resolve_model(
    config: TrainConfig,
    data: RunData,
    rows: int,
    architecture: str | None = None,
    candidate_costs: Mapping[str, float] | None = None,
) -> ModelConfig:
    """The ModelConfig a run's model is built from.

    Args:
        config: the run's settings; `config.model` is the draft (the flags and presets).
        data: the run's records: `vocab_size` and `total_steps` are read.
        rows: the rows of one batch the model sees (`batch_rows`).
        architecture: the architecture --drop_attention chose, or None (the draft's).
        candidate_costs: the measured table of --search_cost=time, or None (the draft's).

    Returns:
        The complete config: every data field set, every option of the chosen attention
        mechanisms written out, `position="auto"` resolved.

    Raises:
        ConfigError: settings the model refuses with these values (a cutoff not below
            the vocabulary size, an architecture of another depth), in one sentence.
    """
    changes: dict[str, object] = {
        "vocab_size": data.vocab_size,
        "batch_size": rows,
        "tau_steps": data.total_steps,
    }
    if architecture is not None:
        changes["architecture"] = architecture
    if candidate_costs is not None:
        changes["candidate_costs"] = dict(candidate_costs)
    try:
        return config.model.replace(**changes)
    except ValueError as e:  # e.g. a cutoff not below the data's vocabulary size
        raise model_error(e) from None
