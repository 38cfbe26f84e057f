"""Drawing the next token: temperature, top-k and top-p (nucleus) filtering.

`filter_log_probs` gives the distribution a `Sampling` draws from:
temperature first, then top-k, then top-p over the renormalised top-k
distribution; temperature 0 is greedy decoding. `sample_tokens` draws from
it with one uniform number per row.

Reference:
    Holtzman et al., "The Curious Case of Neural Text Degeneration" (top-p), ICLR 2020.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import keras
import numpy as np
from keras import ops


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How the next token is drawn from the model's distribution.

    Attributes:
        temperature: divides the log-probabilities; 0 picks the most likely
            token (greedy), 1 samples the model's distribution.
        top_k: keep only the k most likely tokens (0: no limit).
        top_p: keep the smallest set of most likely tokens whose probability
            reaches top_p (1.0: no limit), after top-k.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and math.isfinite(self.temperature)):
            raise ValueError(
                f"temperature must be a finite number >= 0, got {self.temperature}; "
                "use 0 for greedy decoding, 1 for the model's distribution."
            )
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: no limit), got {self.top_k}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1: no limit), got {self.top_p}.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def filter_log_probs(log_probs: Any, sampling: Sampling) -> Any:
    """The distribution that `sampling` draws from (in the module docstring's order) as
    float32 [B, V] log-probabilities summing to one per row, of `log_probs` float [B, V]
    (or logits). Tokens tied with the last one kept are kept too; removed tokens get
    -inf, so greedy (temperature 0) gives 0 at the most likely token, -inf elsewhere.

    Example:
        >>> lp = keras.ops.log(keras.ops.convert_to_tensor([[0.5, 0.3, 0.2]]))
        >>> keras.ops.exp(filter_log_probs(lp, Sampling(top_k=2)))  # [[0.625, 0.375, 0.]]
    """
    logits = ops.cast(log_probs, "float32")
    vocab = logits.shape[-1]
    if sampling.greedy:
        best = ops.one_hot(ops.argmax(logits, axis=-1), vocab, dtype="bool")
        return ops.where(best, 0.0, -np.inf)
    logits = logits / sampling.temperature
    top_k = sampling.top_k if 0 < sampling.top_k < vocab else 0
    if top_k or sampling.top_p < 1.0:
        # The candidates, largest first: the top k ([B, k], far cheaper than a
        # full sort), or the whole sorted vocabulary when only top-p is set.
        if top_k:
            ranked = ops.top_k(logits, top_k, sorted=True)[0]
        else:
            ranked = ops.flip(ops.sort(logits, axis=-1), axis=-1)
        threshold = ranked[:, -1:]  # [B, 1]: the smallest logit kept so far
        if sampling.top_p < 1.0:
            probs = ops.softmax(ranked, axis=-1)
            mass_before = ops.cumsum(probs, axis=-1) - probs  # mass of strictly better tokens
            # The nucleus is a prefix of the ranking: tokens whose better tokens
            # have not yet reached top_p. The first token is always in it.
            count = ops.sum(ops.cast(mass_before < sampling.top_p, "int32"), axis=-1)
            count = ops.maximum(count, 1)
            threshold = ops.take_along_axis(ranked, count[:, None] - 1, axis=-1)
        logits = ops.where(logits >= threshold, logits, -np.inf)
    return logits - ops.logsumexp(logits, axis=-1, keepdims=True)


def sample_tokens(log_probs: Any, sampling: Sampling, seed: Any = None) -> Any:
    """Draws one token per row, int32 [B], from `filter_log_probs(log_probs, sampling)`;
    `seed`: an int, a `keras.random.SeedGenerator`, or on JAX a uint32 [2] key (ignored
    when greedy).

    Inverse-CDF sampling: one uniform number per row, located in the
    cumulative distribution. It needs one random draw instead of one per
    vocabulary entry, which matters under XLA on CPU, where a categorical
    draw over 12,000 entries costs more than the model's whole step.
    """
    filtered = filter_log_probs(log_probs, sampling)
    if sampling.greedy:
        return ops.cast(ops.argmax(filtered, axis=-1), "int32")
    probs = ops.exp(filtered)  # [B, V], 0 where filtered out
    cdf = ops.cumsum(probs, axis=-1)
    u = keras.random.uniform((ops.shape(probs)[0], 1), seed=seed) * cdf[:, -1:]
    # The first token whose cumulative probability exceeds u. A removed token
    # repeats its predecessor's cdf, so it is never the first to exceed u.
    token = ops.sum(ops.cast(cdf <= u, "int32"), axis=-1)
    # Rounding could put u at the very top: fall back to the last allowed token.
    vocab = ops.shape(probs)[-1]
    last = vocab - 1 - ops.argmax(ops.flip(probs > 0.0, axis=-1), axis=-1)
    return ops.cast(ops.minimum(token, ops.cast(last, "int32")), "int32")
