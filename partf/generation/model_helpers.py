"""What generation needs from the model besides its forward pass."""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

from partf.models.par_transformer_xl import PARTransformerXL


def reconfigure(model: PARTransformerXL, **changes: Any) -> PARTransformerXL:
    """A copy of a built `model` with `ModelConfig` fields changed that leave the weights
    alone (ValueError otherwise), e.g. a longer `mem_len` for generation, another
    `eval_mode`, or `batch_size=1` for small memory variables. The memory variables
    start empty; every other variable (weights, step counter) is copied."""
    config = model.config.replace(**changes)
    copy = PARTransformerXL(config, name=model.name, dtype=model.dtype_policy)
    old_state = {id(v) for v in model.state_variables}
    new_state = {id(v) for v in copy.state_variables}
    old = [v for v in model.variables if id(v) not in old_state]
    new = [v for v in copy.variables if id(v) not in new_state]
    if len(old) != len(new) or any(
        tuple(a.shape) != tuple(b.shape) for a, b in zip(old, new, strict=True)
    ):
        raise ValueError(
            f"reconfigure({', '.join(f'{k}={v!r}' for k, v in changes.items())}) changes the "
            "model's weights; change only fields such as mem_len, clamp_len, eval_mode, "
            "batch_size."
        )
    for source, target in zip(old, new, strict=True):
        target.assign(source)
    return copy


def stateless_attentions(model: PARTransformerXL) -> list[str]:
    """Paths of the model's attention layers that carry no state between calls, which
    carried-state generation refuses: there each new token would see only itself (e.g.
    relative or softmax attention with mem_len=0)."""
    return [
        layer.path
        for block in model.blocks
        for _, layer in block.attentions()
        if not layer.state_spec(1)
    ]


def argmax_choices(model: PARTransformerXL) -> tuple[int | None, ...]:
    """Per block, the index of the only candidate whose evaluation weight is non-zero (with
    `eval_mode="argmax"`, a search block's most likely candidate), for `model.forward`'s
    `choices`; None where every candidate counts (other eval modes) or the block is fixed."""
    if model.config.eval_mode != "argmax":
        return tuple(None for _ in model.blocks)
    return tuple(
        None
        if block.arch_logits is None
        else int(np.argmax(ops.convert_to_numpy(block.arch_logits)))
        for block in model.blocks
    )


def with_inference_caches(model: PARTransformerXL, states: Any) -> Any:
    """`states` (per block, per candidate) with each attention's inference cache added,
    where it has one (`inference_state`, e.g. relative attention), for one-token steps."""
    return [
        block.inference_states(block_states)
        for block, block_states in zip(model.blocks, states, strict=True)
    ]
