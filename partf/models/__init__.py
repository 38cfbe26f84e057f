"""Models: the PAR Transformer-XL, its configuration, the bidirectional Encoder and its
masked language model."""

from partf.models.config import (
    ARCHITECTURE_LETTERS,
    ModelConfig,
    architecture_token,
    parse_architecture,
)
from partf.models.encoder import Encoder
from partf.models.masked_lm import MaskedLanguageModel
from partf.models.par_transformer_xl import PARTransformerXL

__all__ = [
    "ARCHITECTURE_LETTERS",
    "Encoder",
    "MaskedLanguageModel",
    "ModelConfig",
    "PARTransformerXL",
    "architecture_token",
    "parse_architecture",
]
