"""The carried state of an exported decoder as named tensors of fixed shape.

`model.forward` carries its state as a nest, per block and per candidate, of
name -> tensor (XL memory and its mask, a linear attention's sums, the last window's
keys and values, a softmax cache, rotary and absolute stream positions), plus each
attention's inference cache (relative attention's projected memory keys and values).
A SavedModel signature or a LiteRT interpreter takes flat named tensors instead:
`StateLayout` names every tensor (`block<b>_<name>`, `stream_position` for absolute
positions) and converts between the two. Cache entries that depend on the weights
alone (relative attention's projected distance encodings) are no input: they are
computed once at export and kept in the graph as constants.

Example:
    >>> layout = StateLayout(model, batch_size=1)
    >>> sorted(layout.shapes())[:2]
    ['block0_keys', 'block0_memory']
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from keras import ops

from partf.generation import with_inference_caches
from partf.models import PARTransformerXL


@dataclasses.dataclass(frozen=True)
class StateEntry:
    """One tensor of the state: where it sits in the nest and its exported name."""

    name: str
    block: int
    slot: int
    key: str
    shape: tuple[int, ...]
    dtype: str


class StateLayout:
    """Every tensor `model.forward` carries for `batch_size` rows, named and of fixed shape.

    Args:
        model: a PARTransformerXL in its generation configuration (memory length set).
        batch_size: rows of the exported state.
    """

    def __init__(self, model: PARTransformerXL, batch_size: int) -> None:
        self.batch_size = int(batch_size)
        states = with_inference_caches(model, model.initial_state(batch_size))
        # An entry whose shape does not follow the batch is made of weights alone.
        wider = with_inference_caches(model, model.initial_state(batch_size + 1))
        self.entries: list[StateEntry] = []
        self.constants: dict[tuple[int, int, str], np.ndarray] = {}
        self._slots = [len(block) for block in states]
        candidates = [block.num_candidates for block in model.blocks]
        for b, (block, block_wider) in enumerate(zip(states, wider, strict=True)):
            for s, (slot, slot_wider) in enumerate(zip(block, block_wider, strict=True)):
                for key, value in slot.items():
                    shape = tuple(int(d) for d in value.shape)
                    if shape == tuple(int(d) for d in slot_wider[key].shape):
                        self.constants[(b, s, key)] = ops.convert_to_numpy(value)
                        continue
                    if s >= candidates[b]:  # absolute positions: after block 0's candidates
                        name = f"stream_{key}"
                    elif candidates[b] == 1:
                        name = f"block{b}_{key}"
                    else:
                        name = f"block{b}_{s}_{key}"
                    dtype = str(ops.convert_to_numpy(value).dtype)
                    self.entries.append(StateEntry(name, b, s, key, shape, dtype))

    def shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """name -> (shape, dtype) of every carried tensor, in nest order."""
        return {e.name: (e.shape, e.dtype) for e in self.entries}

    def zeros(self) -> dict[str, np.ndarray]:
        """The empty state ("no context yet"), as numpy arrays by name."""
        return {e.name: np.zeros(e.shape, e.dtype) for e in self.entries}

    def nest(self, flat: dict[str, Any]) -> list[list[dict[str, Any]]]:
        """Named tensors -> the nest `model.forward` takes (constants added back)."""
        states: list[list[dict[str, Any]]] = [[{} for _ in range(n)] for n in self._slots]
        for (b, s, key), value in self.constants.items():
            states[b][s][key] = ops.convert_to_tensor(value)
        for e in self.entries:
            states[e.block][e.slot][e.key] = flat[e.name]
        return states

    def flatten(self, states: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """The nest `model.forward` returns -> its carried tensors by name."""
        return {e.name: ops.cast(states[e.block][e.slot][e.key], e.dtype) for e in self.entries}
