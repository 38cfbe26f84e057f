"""Masking shared by every mechanism: the score of an excluded entry, which tokens are
real, and a softmax over the real entries only."""

from __future__ import annotations

from typing import Any

from keras import ops

#: Score (logit or log-scale) of an entry that must count for nothing: exp() of it
#: underflows to 0 in float32, yet it is finite, so the difference of two such values
#: stays 0 instead of NaN, and a row with no visible entry stays finite.
MASKED = -1e30


def masked_softmax(logits: Any, valid: Any, axis: int = -1) -> Any:
    """float32 softmax over `axis` where only `valid` entries (bool, broadcastable to
    `logits`) count; a row without any valid entry gives all zeros (not NaN)."""
    valid = ops.broadcast_to(valid, ops.shape(logits))
    if logits.shape[axis] == 1:  # one entry: weight 1 if it counts (and no Keras warning)
        return ops.cast(valid, "float32")
    probs = ops.softmax(ops.where(valid, ops.cast(logits, "float32"), MASKED), axis=axis)
    # A row of masked logits only would come out uniform: zero it instead.
    return probs * ops.cast(ops.any(valid, axis=axis, keepdims=True), "float32")


def valid_tokens(mask: Any | None, batch: Any, length: Any, dtype: str = "bool") -> Any:
    """[B, T] in `dtype`: 1/True for real tokens (all of them when `mask` is None)."""
    if mask is None:
        return ops.ones((batch, length), dtype=dtype)
    return ops.cast(mask, dtype)
