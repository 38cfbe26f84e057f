"""Models: the PAR Transformer-XL and its configuration."""

from partf.models.config import (
    ARCHITECTURE_LETTERS,
    ModelConfig,
    architecture_token,
    parse_architecture,
)
from partf.models.par_transformer_xl import PARTransformerXL

__all__ = [
    "ARCHITECTURE_LETTERS",
    "ModelConfig",
    "PARTransformerXL",
    "architecture_token",
    "parse_architecture",
]
