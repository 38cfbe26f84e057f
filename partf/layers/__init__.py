"""Model building blocks: PAR stochastic blocks, Gumbel-softmax, adaptive softmax."""

from partf.layers.adaptive_softmax import (
    AdaptiveSoftmax,
    tail_projection_dims,
    validate_cutoffs,
)
from partf.layers.candidates import BUILTIN_CANDIDATES, EVAL_MODES, candidate_kind
from partf.layers.feed_forward import FeedForward
from partf.layers.gumbel import gumbel_noise, gumbel_softmax
from partf.layers.stochastic_block import StochasticBlock
from partf.layers.temperature import TAU_SCHEDULES, Temperature, scheduled_temperature

__all__ = [
    "BUILTIN_CANDIDATES",
    "EVAL_MODES",
    "TAU_SCHEDULES",
    "AdaptiveSoftmax",
    "FeedForward",
    "StochasticBlock",
    "Temperature",
    "candidate_kind",
    "gumbel_noise",
    "gumbel_softmax",
    "scheduled_temperature",
    "tail_projection_dims",
    "validate_cutoffs",
]
