"""The causal model's XL memory, kept in non-trainable variables between calls.

Every block's state (its candidates' XL memory or running sums, `state_spec`) lives in
variables sized for the fixed context batch, like a stateful RNN, with one copy per
state set: "train" for training calls, "eval" for evaluation, so evaluating never
disturbs the training context. With absolute positions each set also keeps the stream
position reached by every row.

States handed to and returned by `forward` are nested per block, then per candidate:
name -> tensor; with absolute positions block 0's list ends with {"position": int32 [B]}.
`XLMemory` reads and writes the variables in that form.

Example:
    >>> model.reset_state("eval")            # empty the evaluation memory
    >>> states = model.initial_state(batch)   # "no context" for model.forward
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import keras
from keras import ops

if TYPE_CHECKING:
    from partf.layers.stochastic_block import StochasticBlock
    from partf.models.backbone import Backbone
    from partf.models.config import ModelConfig

#: The state sets: one copy of the memory for training calls, one for evaluation.
STATE_SETS = ("train", "eval")

# Nested per block, then per candidate: name -> tensor (or variable).
States = list[list[dict[str, Any]]]


class XLMemory:
    """Mixin for the `keras.Model` that keeps its blocks' states in variables.

    The model provides `config`, `backbone` and its `blocks`, and calls
    `_add_block_states()` and then `_add_position_states()` where those variables belong
    in its variable order. The states' form (`initial_state`, the position carried in
    block 0's list) is the backbone's.
    """

    config: ModelConfig
    backbone: Backbone
    blocks: list[StochasticBlock]

    def _add_block_states(self) -> None:
        """Makes one copy of every block's state per set: [set][block][candidate][name]."""
        self._states: dict[str, States] = {}
        for which in STATE_SETS:
            self._states[which] = [
                [
                    {
                        name: self._add_state_variable(
                            f"{which}_state_{b}_{c}_{name}", shape, dtype
                        )
                        for name, (shape, dtype) in spec.items()
                    }
                    for c, spec in enumerate(block.state_spec(self.config.batch_size))
                ]
                for b, block in enumerate(self.blocks)
            ]

    def _add_position_states(self) -> None:
        """With absolute positions, makes the stream position reached, one count per row
        and set; without, nothing."""
        self._position_vars: dict[str, keras.Variable] = {}
        if self.config.absolute_positions:
            for which in STATE_SETS:
                self._position_vars[which] = self._add_state_variable(
                    f"{which}_state_position", (self.config.batch_size,), "int32"
                )

    def _add_state_variable(self, name: str, shape: tuple[int, ...], dtype: str) -> keras.Variable:
        """One memory variable, zero-initialised.

        `synchronization="on_read"` makes it per replica under a `tf.distribute`
        strategy: each replica reads and writes its own copy, so the memory of
        replica k continues the streams (rows) that replica k receives. With no
        strategy (or another backend) it is an ordinary variable.
        """
        with keras.name_scope(self.name, caller=self):
            variable = keras.Variable(
                initializer="zeros",
                shape=shape,
                dtype=dtype,
                trainable=False,
                autocast=False,
                synchronization="on_read",
                # Read across replicas (e.g. by model.save), the first replica's copy.
                aggregation="only_first_replica",
                name=name,
            )
        self._track_variable(variable)
        return variable

    @property
    def state_variables(self) -> list[keras.Variable]:
        """All memory variables, training set then evaluation set."""
        return [var for which in STATE_SETS for var in self._state_vars(which)]

    def _state_vars(self, which: str) -> list[keras.Variable]:
        blocks = [var for block in self._states[which] for cand in block for var in cand.values()]
        position = [self._position_vars[which]] if which in self._position_vars else []
        return blocks + position

    def initial_state(self, batch_size: int) -> States:
        """Empty states ("no context") for `forward`, per block and candidate; with
        absolute positions block 0's list ends with {"position": zeros int32 [B]}."""
        return self.backbone.initial_state(batch_size)

    def reset_state(self, which: str = "all") -> None:
        """Empties the memory: which = "all", "train" or "eval"."""
        if which not in ("all", *STATE_SETS):
            raise ValueError(f"reset_state(which={which!r}): use 'all', 'train' or 'eval'.")
        for name in STATE_SETS if which == "all" else (which,):
            for var in self._state_vars(name):
                var.assign(ops.zeros(var.shape, var.dtype))

    def _read_states(self, which: str) -> States:
        states = [
            [{name: var.value for name, var in cand.items()} for cand in block]
            for block in self._states[which]
        ]
        if which in self._position_vars:
            states[0] = [*states[0], {"position": self._position_vars[which].value}]
        return states

    def _write_states(self, which: str, states: States) -> None:
        states, position = self._split_position_state(states)
        if position is not None:
            self._position_vars[which].assign(ops.cast(position, "int32"))
        for block_vars, block_states in zip(self._states[which], states, strict=True):
            for cand_vars, cand_states in zip(block_vars, block_states, strict=True):
                for name, var in cand_vars.items():
                    var.assign(ops.cast(cand_states[name], var.dtype))

    def _split_position_state(self, states: States) -> tuple[States, Any | None]:
        """(the blocks' states, the stream position int32 [B] or None): with absolute
        positions, block 0's list carries the position after its candidates."""
        return self.backbone.split_position_state(states)
