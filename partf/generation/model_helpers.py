"""What generation needs from the model besides its forward pass.

A copy with settings that leave the weights alone (`reconfigure`), the
attentions that carry no state (`stateless_attentions`, which carried-state
generation refuses), the candidate each block's argmax weights pick
(`argmax_choices`, run alone by `forward_choosing`), and the
attention inference caches added to a state (`with_inference_caches`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from keras import ops

from partf.attention.base import Attention
from partf.models.par_transformer_xl import PARTransformerXL


def reconfigure(model: PARTransformerXL, **changes: Any) -> PARTransformerXL:
    """A copy of `model` with config fields changed that leave the weights alone.

    Useful for generation: a longer `mem_len` (each new token then sees more
    context), another `eval_mode`, or `batch_size=1` to keep the stateful
    memory variables small. The memory variables start empty; every other
    variable (weights, step counter) is copied.

    Args:
        model: a built model.
        **changes: `ModelConfig` fields, e.g. mem_len=512.

    Returns:
        A new `PARTransformerXL`.

    Raises:
        ValueError: a change alters the weights' shapes (e.g. d_model).

    Example:
        >>> long_memory = reconfigure(model, mem_len=512, batch_size=1)
    """
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
    """Paths of the model's attention layers that carry no state between calls.

    Carried-state generation with such a layer would let each new token see
    only itself there (e.g. relative or softmax attention with mem_len=0).
    """
    return [
        layer.path
        for block in model.blocks
        for layer in block.sublayers
        if isinstance(layer, Attention) and not layer.state_spec(1)
    ]


def argmax_choices(model: PARTransformerXL) -> tuple[int | None, ...]:
    """Per block, the index of the only candidate whose evaluation weight is non-zero.

    With `eval_mode="argmax"` a stochastic block's output at evaluation is
    exactly its most likely candidate's. None where every candidate counts
    (other eval modes) or the block is fixed already.
    """
    if model.config.eval_mode != "argmax":
        return tuple(None for _ in model.blocks)
    return tuple(
        None
        if block.arch_logits is None
        else int(np.argmax(ops.convert_to_numpy(block.arch_logits)))
        for block in model.blocks
    )


def with_inference_caches(model: PARTransformerXL, states: Any) -> Any:
    """`states` with each attention's inference cache added, where it has one
    (`inference_state`, e.g. relative attention), for one-token steps."""
    cached = []
    for block, block_states in zip(model.blocks, states, strict=True):
        new_block, slot = [], 0
        for (kind, _), state in zip(block.kinds, block_states, strict=True):
            layer = block.sublayers[slot] if kind != "identity" else None
            slot += kind != "identity"
            if kind == "attention" and state and hasattr(layer, "inference_state"):
                state = layer.inference_state(state)
            new_block.append(state)
        cached.append(new_block)
    return cached


def _run_candidate(block: Any, index: int, x: Any, states: list, mask: Any) -> tuple[Any, list]:
    """Block `block` with only candidate `index` (the one argmax eval weights pick)."""
    kind, _ = block.kinds[index]
    if kind == "identity":
        return x, states
    slot = sum(k != "identity" for k, _ in block.kinds[:index])
    layer, norm = block.sublayers[slot], block.norms[slot]
    if kind == "dense":
        return norm(x + layer(x, training=False)), states
    y, state = layer(x, state=states[index] or None, mask=mask, training=False)
    states = list(states)
    states[index] = state
    return norm(x + y), states


def forward_choosing(
    model: PARTransformerXL, inputs: Any, states: Any, choices: Sequence[int | None]
) -> tuple[Any, Any]:
    """`model.forward(inputs, states, training=False)`, running in each block only
    the candidate `choices` names (None: the whole block)."""
    inputs = ops.cast(ops.convert_to_tensor(inputs), "int32")
    mask = ops.not_equal(inputs, 0)
    x = model.embedding(inputs)
    x = x * ops.cast(math.sqrt(model.config.d_model), x.dtype)  # no dropout at inference
    tau = model.tau() if any(choice is None for choice in choices) else None
    new_states = []
    for block, block_states, choice in zip(model.blocks, states, choices, strict=True):
        if choice is None:
            x, block_states = block(x, states=block_states, tau=tau, mask=mask, training=False)
        else:
            x, block_states = _run_candidate(block, choice, x, block_states, mask)
        new_states.append(block_states)
    return x, new_states
