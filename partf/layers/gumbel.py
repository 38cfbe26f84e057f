"""Gumbel-softmax (concrete) samples: a differentiable stand-in for a
categorical draw.

Adding Gumbel noise to logits and taking the argmax draws exactly from
softmax(logits) (the Gumbel-max trick). Replacing the argmax by a softmax at
temperature tau gives weights that approach that one-hot draw as tau -> 0 and
carry gradients to the logits at every tau.

Reference: Jang et al., "Categorical Reparameterization with Gumbel-Softmax",
ICLR 2017; Maddison et al., "The Concrete Distribution", ICLR 2017.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from partf.random import uniform as uniform_draws

# Smallest uniform draw: keeps -log(-log(u)) finite (about -3.1 at worst).
_TINY = 1e-10


def gumbel_noise(shape: tuple[int, ...], seed: keras.random.SeedGenerator | int | None) -> Any:
    """Standard Gumbel samples -log(-log(U)), U ~ Uniform(0, 1), float32."""
    uniform = uniform_draws(shape, seed, minval=_TINY, maxval=1.0, dtype="float32")
    return -ops.log(-ops.log(uniform))


def gumbel_softmax(
    logits: Any,
    tau: Any,
    seed: keras.random.SeedGenerator | int | None = None,
    straight_through: bool = False,
    sample_shape: tuple[int, ...] = (),
) -> Any:
    """Relaxed one-hot samples from the categorical softmax(logits [..., C]) at temperature
    `tau` > 0: float32 [*sample_shape, ..., C] weights summing to one on the last axis,
    `sample_shape` the leading shape of independent samples ((B,): one per example).

    With `straight_through` the forward value is the exact one-hot of the sample's
    argmax, while gradients are those of the soft sample.
    """
    logits = ops.cast(logits, "float32")
    shape = tuple(sample_shape) + tuple(logits.shape)
    noisy = (logits + gumbel_noise(shape, seed)) / ops.cast(tau, "float32")
    soft = ops.softmax(noisy, axis=-1)
    if not straight_through:
        return soft
    hard = ops.one_hot(ops.argmax(soft, axis=-1), logits.shape[-1], dtype="float32")
    # hard + (soft - stop_gradient(soft)): exactly one-hot forward (the bracket
    # is exactly zero), soft-sample gradients backward.
    return hard + (soft - ops.stop_gradient(soft))
