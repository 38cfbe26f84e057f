"""What a PAR search shows of itself, shared by the causal model and the Encoder:
`arch_variables`, `candidate_names` (the columns of `pi()`), `pi()`,
`architecture_string()` and `tau()`. A model that mixes it in provides `blocks`,
`temperature`, `step` (`_add_step_counter`), `_fixed_architecture()` (its architecture
string, or None during a search) and `_search_candidates()`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import keras
import numpy as np
from keras import ops

from partf.layers.temperature import Temperature
from partf.models.config import architecture_token, parse_architecture

if TYPE_CHECKING:
    from partf.layers.stochastic_block import StochasticBlock
    from partf.models.config import ModelConfig


class SearchInterface:
    """Mixin for a `keras.Model` whose blocks may be a PAR search."""

    blocks: list[StochasticBlock]
    temperature: Temperature | None
    step: keras.Variable | None

    def _add_step_counter(self) -> keras.Variable:
        """The int64 count of training calls, which the temperature anneals from."""
        # Every replica adds 1 to the same count: keep the first replica's update.
        return self.add_weight(
            name="step",
            shape=(),
            dtype="int64",
            initializer="zeros",
            trainable=False,
            aggregation="only_first_replica",
        )

    @staticmethod
    def _make_temperature(config: ModelConfig) -> Temperature:
        """The `Temperature` layer of `config`'s tau settings, named "temperature"."""
        return Temperature(
            config.tau_schedule,
            config.tau_start,
            config.tau_end,
            config.tau_steps,
            config.tau_is_trainable,
            name="temperature",
        )

    def tau(self) -> Any:
        """Current Gumbel-softmax temperature (float32 scalar)."""
        return self.temperature(ops.convert_to_tensor(self.step))

    @property
    def candidate_names(self) -> list[str]:
        """Names of the candidates that `pi()` columns stand for."""
        architecture = self._fixed_architecture()
        if architecture is None:
            return list(self._search_candidates())
        return list(dict.fromkeys(parse_architecture(architecture)))

    @property
    def arch_variables(self) -> list[keras.Variable]:
        """The architecture-logit variables of a search (paths contain "arch_logits")."""
        return [block.arch_logits for block in self.blocks if block.arch_logits is not None]

    def pi(self) -> np.ndarray:
        """[blocks, candidates]: softmax of each block's architecture logits; one-hot rows
        for a fixed architecture (columns `candidate_names`)."""
        names = self.candidate_names
        architecture = self._fixed_architecture()
        if architecture is not None:
            chosen = [names.index(name) for name in parse_architecture(architecture)]
            return np.eye(len(names), dtype=np.float32)[chosen]
        # A block searching fewer candidates (an 'A|I' block) has zeros in the others'
        # columns; a fixed block among searched ones has a one-hot row.
        rows = np.zeros((len(self.blocks), len(names)), np.float32)
        for row, block in zip(rows, self.blocks, strict=True):
            columns = [names.index(name) for name in block.candidates]
            row[columns] = np.asarray(ops.convert_to_numpy(block.pi()), np.float32)
        return rows

    def architecture_string(self) -> str:
        """The most likely candidate per block, e.g. "A A D D D I" or "softmax D I
        softmax": a valid `architecture` for the fixed model (identity blocks included)."""
        names = self.candidate_names
        return " ".join(architecture_token(names[i]) for i in np.argmax(self.pi(), axis=1))
