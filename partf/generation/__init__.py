"""Text generation from a PARTransformerXL.

Modules:
    sampling: `Sampling` settings (temperature, top-k, top-p), `filter_log_probs`
        and `sample_tokens`.
    generator: `Generator` (carried-state decoding or the recompute baseline,
        as one compiled loop), `GenerationResult` and the one-call `generate`.
    model_helpers: `reconfigure` (a copy with, e.g., a longer memory) and what
        the generator asks of the model (`argmax_choices`,
        `stateless_attentions`, `with_inference_caches`).

Example:
    >>> from partf.generation import generate
    >>> model = PARTransformerXL(vocab_size=100, d_model=16, num_heads=2, d_ffn=32,
    ...                          num_layers=2, mem_len=64, cutoffs=(20,), batch_size=1)
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
