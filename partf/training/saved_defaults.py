"""A resumed run keeps the attention defaults its checkpoints were trained with.

partf's attention defaults have changed between versions (the generations of
`partf.models.attention_defaults`), so a run started before a change and resumed after
it would otherwise be built with the new defaults and refused (or worse, trained on
with attentions that differ from those it learned). A run resumed without
--attention_defaults takes the generation its newest checkpoint names instead.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from partf.training.checkpoint import CheckpointManager
from partf.training.config import TrainConfig

logger = logging.getLogger("partf.training")


def saved_generation(model: Any) -> str | None:
    """The generation of attention defaults a saved ModelConfig dict was built with
    (`ModelConfig.from_dict` reads dicts of every version), or None if it is unreadable."""
    from partf.models.config import ModelConfig

    try:
        return ModelConfig.from_dict(model).attention_defaults
    except (TypeError, ValueError, AttributeError):
        return None


def keep_saved_defaults(config: TrainConfig, folder: Path) -> TrainConfig:
    """`config` with the attention defaults of the newest checkpoint in `folder`, when
    the command line left --attention_defaults out and that checkpoint was trained with
    an earlier generation; else `config` as it is.

    Example: a checkpoint written with "authors" before EVA's chunk mask became the
    authors' resumes with --attention_defaults=authors_v1 (EVA's chunk_mask partf).
    """
    from partf.models.attention_defaults import ATTENTION_GENERATIONS

    if "attention_defaults" in config.model:
        return config
    meta = CheckpointManager(folder).latest_meta()
    saved = saved_generation(((meta or {}).get("config") or {}).get("model"))
    if saved is None or saved == ATTENTION_GENERATIONS[-1]:
        return config
    logger.info(
        "resuming with --attention_defaults=%s, the attention defaults %s was trained with",
        saved,
        folder,
    )
    return dataclasses.replace(config, model={**config.model, "attention_defaults": saved})


def defaults_hint(saved_model: Any, differences: list[str]) -> str:
    """The end of the refusal to resume: how to resume when the attention options differ
    because the run was trained with another generation of attention defaults."""
    saved = saved_generation(saved_model)
    if saved is None or not any(d.startswith("attention_options:") for d in differences):
        return "."
    return (
        f" (that run was trained with --attention_defaults={saved}: pass that, or leave the "
        "flag out to keep its checkpoint's)."
    )
