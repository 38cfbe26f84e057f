"""Text generation from a PARTransformerXL: sampling settings and filters (`sampling`), the
compiled decoding loop (`generator`) and what it asks of the model (`model_helpers`).

Example:
    >>> from partf.generation import generate
    >>> generate(model, [[2, 17, 42]], max_tokens=10, top_p=0.9, seed=0).tokens.shape
    (1, 10)
"""

from partf.generation.generator import MODES, GenerationResult, Generator, generate
from partf.generation.model_helpers import (
    argmax_choices,
    reconfigure,
    stateless_attentions,
    with_inference_caches,
)
from partf.generation.sampling import Sampling, filter_log_probs, sample_tokens

__all__ = [
    "MODES",
    "GenerationResult",
    "Generator",
    "Sampling",
    "argmax_choices",
    "filter_log_probs",
    "generate",
    "reconfigure",
    "sample_tokens",
    "stateless_attentions",
    "with_inference_caches",
]
