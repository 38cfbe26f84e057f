"""What a PAR architecture costs: forward FLOPs per token from the configuration, or
measured time.

A candidate's FLOPs are its layer's analytic count (`flops_per_token`: matrix products, 2
FLOPs per multiply-add, at the model's segment, memory and batch); the identity costs
nothing. The cost-aware search adds lambda times the expected cost under pi to the loss,
in forward MFLOPs per token or, with `search_cost="time"`, in the dense blocks of the
run's measured table (`ModelConfig.candidate_costs`, partf.training.cost_table).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from keras import ops

from partf.layers.adaptive_softmax import tail_projection_dims

if TYPE_CHECKING:
    from partf.layers.stochastic_block import StochasticBlock
    from partf.models.config import ModelConfig


class CostedModel(Protocol):
    """What the costs read of a model (`PARTransformerXL` has it): its configuration and
    its blocks. Named here so that this module need not import the model, which imports
    it for the cost term of its loss."""

    config: ModelConfig
    blocks: Sequence[StochasticBlock]


def candidate_flops(model: CostedModel, seq_len: int) -> list[list[float]]:
    """Per block, the forward FLOPs per token of each of its candidates."""
    batch = model.config.batch_size
    return [block.candidate_flops(seq_len, batch) for block in model.blocks]


def cost_key(kind: str, mechanism: str | None) -> str:
    """A candidate's name in a measured cost table: its attention's registry name, or
    "dense" or "identity"."""
    return mechanism if kind == "attention" and mechanism else kind


def measured_costs(model: CostedModel) -> list[list[float]]:
    """Per block, each candidate's measured time per token (forward and backward) in dense
    blocks, from `config.candidate_costs` (ValueError: a candidate the table lacks)."""
    table = model.config.candidate_costs
    costs = []
    for block in model.blocks:
        keys = [cost_key(kind, mechanism) for kind, mechanism in block.kinds]
        missing = [key for key in keys if key not in table]
        if missing:
            raise ValueError(
                f"the measured cost table has no {', '.join(missing)} (it holds "
                f"{', '.join(sorted(table)) or 'nothing'}); measure it again for these "
                "candidates (partf.training.cost_table)."
            )
        costs.append([table[key] for key in keys])
    return costs


def search_costs(model: CostedModel, seq_len: int) -> list[list[float]]:
    """Per block, each candidate's cost as the search's loss charges it: forward MFLOPs
    per token (`search_cost="flops"`) or measured time per token in dense blocks ("time")."""
    if model.config.search_cost == "time":
        return measured_costs(model)
    return [[c / 1e6 for c in costs] for costs in candidate_flops(model, seq_len)]


def expected_cost(model: CostedModel, seq_len: int) -> Any:
    """float32 scalar tensor: the sum over blocks of pi . `search_costs`, the cost term
    lambda multiplies; differentiable in the architecture logits."""
    if model.config.search_cost == "time":
        return _expected(model, measured_costs(model))
    return expected_flops(model, seq_len) / 1e6


def _expected(model: CostedModel, costs_per_block: list[list[float]]) -> Any:
    total = ops.zeros((), "float32")
    for block, costs in zip(model.blocks, costs_per_block, strict=True):
        cost = ops.convert_to_tensor(np.asarray(costs, np.float32))
        total = total + ops.sum(ops.cast(block.pi(), "float32") * cost)
    return total


def expected_flops(model: CostedModel, seq_len: int) -> Any:
    """float32 scalar tensor: the blocks' FLOPs per token expected under pi, the sum over
    blocks of pi . cost; differentiable in the architecture logits."""
    return _expected(model, candidate_flops(model, seq_len))


def output_flops(model: CostedModel) -> float:
    """Forward FLOPs per token of the output layer scoring every token exactly (the
    adaptive softmax's head and every tail cluster, or the plain softmax)."""
    config = model.config
    d, vocab = config.d_model, config.vocab_size
    if not config.cutoffs:
        return 2.0 * d * vocab
    cutoffs = tuple(config.cutoffs)
    dims = tail_projection_dims(d, len(cutoffs), config.proj_factor, config.proj_dims)
    bounds = (*cutoffs, vocab)
    macs = d * (cutoffs[0] + len(cutoffs))
    for i, dim in enumerate(dims):
        macs += d * dim + dim * (bounds[i + 1] - bounds[i])
    return 2.0 * macs


def training_flops_per_token(model: CostedModel, seq_len: int) -> float:
    """Forward FLOPs per token of the model as it trains: a fixed model's own, a mixture
    search's every candidate (each runs at every step), a sampled-path search's blocks
    expected under its current pi (one candidate runs per step); plus the output layer.
    Forward and backward together cost about three times this."""
    costs = candidate_flops(model, seq_len)
    if model.config.is_stochastic and model.config.search_estimator == "sampled":
        blocks = float(ops.convert_to_numpy(expected_flops(model, seq_len)))
    else:
        blocks = float(sum(sum(c) for c in costs))
    return blocks + output_flops(model)


def model_flops(model: CostedModel, seq_len: int) -> dict[str, float]:
    """Forward FLOPs per token of the discrete architecture, each block's most likely
    candidate (a fixed model's only one): {"blocks", "output", "total"}."""
    pi = [np.asarray(ops.convert_to_numpy(block.pi())) for block in model.blocks]
    costs = candidate_flops(model, seq_len)
    blocks = float(sum(c[int(np.argmax(p))] for p, c in zip(pi, costs, strict=True)))
    output = output_flops(model)
    return {"blocks": blocks, "output": output, "total": blocks + output}
