"""Text generation from a PARTransformerXL (see `partf.generation.generator`)."""

from partf.generation.generator import (
    MODES,
    GenerationResult,
    Generator,
    Sampling,
    argmax_choices,
    filter_log_probs,
    forward_choosing,
    generate,
    reconfigure,
    sample_tokens,
    stateless_attentions,
    with_inference_caches,
)

__all__ = [
    "MODES",
    "GenerationResult",
    "Generator",
    "Sampling",
    "argmax_choices",
    "filter_log_probs",
    "forward_choosing",
    "generate",
    "reconfigure",
    "sample_tokens",
    "stateless_attentions",
    "with_inference_caches",
]
