"""Exporting a trained model for decoding where partf is not installed.

Modules:
    state: `StateLayout`, the carried state as named tensors of fixed shape.
    sampling: drawing a token in the graph with the settings as tensors.
    decoder: `Decoder` (a tf.Module: prefill, step, generate_ids, generate) and
        `ExportError`.
    writer: `export`, a SavedModel or a LiteRT file written whole or not at all.

Example:
    >>> from partf.export import export
    >>> export(model, "exported/base", context=1024, sp_model="data/tokenizer/wiki2_12k.model")
"""

from partf.export.decoder import Decoder, ExportError
from partf.export.state import StateLayout
from partf.export.writer import FORMATS, export

__all__ = ["FORMATS", "Decoder", "ExportError", "StateLayout", "export"]
