"""The second stage of the PAR method: from a finished search to a fixed architecture.

A search run ends with pi, the probability of each candidate in each block, in its
`results.json`. `searched_architecture` turns pi into the discrete architecture (the
most likely candidate per block, identity blocks dropped), and `config_from_search`
makes the `TrainConfig` that trains it as a fixed model with the search's settings
(`partf-train --from_search checkpoints/NAME`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from partf.models.config import architecture_token, is_searched_architecture
from partf.run_folder import RunFolder, RunFolderError
from partf.training.config import ConfigError, TrainConfig, check_saved_config
from partf.training.resolve import resolve_model

#: How the search run started, which its stage 2 does not inherit: a stage 2 starts from
#: scratch unless its own command line gives --init_from (a fine-tune of the search).
STARTING_FIELDS = ("init_from", "drop_attention", "drop_attention_to")


def searched_architecture(pi: Sequence[Sequence[float]], candidates: Sequence[str]) -> str:
    """The discrete architecture of a search: the most likely candidate per block,
    identity blocks dropped (they compute nothing), e.g. "A A D D D", in the tokens of
    `--architecture`; `pi` has one row per block, a column per name of `candidates`.

    Raises:
        ConfigError: every block chose the identity, or a block's pi is still exactly
            uniform (a search stopped before its logits moved: its argmax would be the
            first candidate by default, not by choice).
    """
    pi = np.asarray(pi, np.float64)
    # A tie for the largest pi (a search whose block is still uniform over the candidates
    # it has; a searched 'A|I' block has zeros in the other columns).
    undecided = [b + 1 for b, row in enumerate(pi) if np.count_nonzero(row == row.max()) > 1]
    if undecided:
        raise ConfigError(
            f"the search has not decided block(s) {', '.join(map(str, undecided))}: pi is "
            "still uniform there (stopped within --arch_freeze_steps?); finish the search "
            "before training its architecture."
        )
    names = [candidates[int(i)] for i in np.argmax(pi, axis=1)]
    kept = [architecture_token(name) for name in names if name != "identity"]
    if not kept:
        raise ConfigError("the search chose the identity in every block; nothing to train.")
    return " ".join(kept)


@dataclasses.dataclass(frozen=True)
class FinishedSearch:
    """What `config_from_search` needs from a search run's results.json."""

    name: str  # the search run's model_name
    pi: list[list[float]]  # candidate probabilities, one row per block
    candidates: list[str]  # candidate names, in the order of pi's columns
    model: dict[str, Any]  # the run's ModelConfig, as a dict
    training: dict[str, Any]  # the run's TrainConfig without the model, as a dict

    @property
    def architecture(self) -> str:
        """The fixed architecture pi chose (`searched_architecture`)."""
        return searched_architecture(self.pi, self.candidates)


def read_search(folder: str | Path) -> FinishedSearch:
    """The results (name, pi, candidates and configuration) of the search run whose
    checkpoints are in `folder` (checkpoints/NAME).

    Raises:
        ConfigError: `folder` holds no finished search (no readable results.json with pi,
            candidates and the configuration), or that run trained a fixed architecture.
        FormatError: its results.json is of another partf format, or lacks a setting.
    """
    try:
        results = RunFolder(folder).read_results(f"--from_search {folder}: its results.json")
    except RunFolderError:
        results = None
    try:
        found = FinishedSearch(
            name=results.get("model_name", Path(folder).name),
            pi=results["pi"],
            candidates=results["candidates"],
            model=results["config"]["model"],
            training=results["config"]["training"],
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(
            f"--from_search {folder}: no finished search there (needs the results.json that a "
            "completed partf-train run writes in checkpoints/NAME)."
        ) from None
    check_saved_config(results["config"], f"--from_search {folder}: its results.json")
    architecture = found.model["architecture"]
    if architecture is not None and not is_searched_architecture(architecture):
        raise ConfigError(
            f"--from_search {folder}: that run trained the fixed architecture "
            f"{found.model['architecture']!r}, not a search; use --architecture instead."
        )
    return found


def config_from_search(
    folder: str | Path,
    given: TrainConfig,
    explicit: Collection[str],
    *,
    model: Mapping[str, Any] | None = None,
) -> TrainConfig:
    """The configuration that trains the architecture the search in `folder`
    (checkpoints/NAME) found as a fixed model, named "<search name>-fixed" and resuming:
    the search run's settings, except the training settings named in `explicit` (given on
    the command line: taken from `given`, whose model is not read) and the `model` fields
    the command line gives (ModelConfig field -> value, the --attn_* flags as
    attention_options). `model` is a mapping, not a ModelConfig, since a flag may be
    valid only with the search's other fields (--num_heads=3 for a search of d_model 96).

    Raises:
        ConfigError: `folder` holds no finished search, or the settings do not go
            together.
    """
    found = read_search(folder)
    values = {
        name: value if name in explicit or name in STARTING_FIELDS else found.training[name]
        for name, value in given.training_dict().items()
    }
    if "model_name" not in explicit:
        values["model_name"] = f"{found.name}-fixed"
    if "overwrite" not in explicit:
        # The search may have been started with --overwrite; its fixed run resumes.
        values["overwrite"] = False
    model = resolve_model(
        model or {}, objective=values["objective"], search=values["search"], from_search=found
    )
    return TrainConfig(**values, model=model)
