"""Models: the PAR Transformer-XL, its configuration, and the bidirectional Encoder."""

from partf.models.config import (
    ARCHITECTURE_LETTERS,
    ModelConfig,
    architecture_token,
    parse_architecture,
)
from partf.models.encoder import Encoder
from partf.models.par_transformer_xl import PARTransformerXL

__all__ = [
    "ARCHITECTURE_LETTERS",
    "Encoder",
    "ModelConfig",
    "PARTransformerXL",
    "architecture_token",
    "parse_architecture",
]
