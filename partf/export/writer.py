"""Writing an export: a SavedModel, or a LiteRT flatbuffer, and its description.

The output folder is complete or absent: everything is written into a temporary folder
beside it (`.tmp-<pid>-<name>`), which is renamed over the final name once complete, and
removed when anything fails. Beside the model, `export.json` describes it: the format,
the context, the vocabulary, the state tensors (name, shape, dtype) and the signatures.

    DIR/saved_model.pb, DIR/variables/   (--format saved_model)
    DIR/model.tflite                     (--format litert)
    DIR/export.json
    DIR/decode.py                        (decoding without partf: standalone.py)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from partf.errors import UsageError
from partf.export.decoder import Decoder, ExportError

FORMATS = ("saved_model", "litert")
DESCRIPTION_FILE = "export.json"
LITERT_FILE = "model.tflite"
#: The decoding client that needs no partf (partf/export/standalone.py).
CLIENT_FILE = "decode.py"
#: Tokens the LiteRT prefill reads per call: a prompt is fed in such chunks, the
#: first left-padded with 0 (LiteRT runs fixed shapes fastest).
LITERT_CHUNK = 64


def _check_out(out: Path) -> None:
    if out.exists():
        raise UsageError(f"--out {out} exists; pass a new folder or remove it first")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: its folder {out.parent} does not exist; create it first")


@contextlib.contextmanager
def _folder_beside(out: Path):
    """A temporary folder beside `out`, renamed to `out` when the block completes."""
    tmp = out.with_name(f".tmp-{os.getpid()}-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def describe(decoder: Decoder, fmt: str, signatures: dict[str, Any]) -> dict[str, Any]:
    """What export.json holds."""
    from partf.serialization import FORMAT_KEY, FORMAT_VERSION

    return {
        FORMAT_KEY: FORMAT_VERSION,  # the model format: it holds the model's config
        "export_format": fmt,
        "model": decoder.model.config.to_dict(),
        "batch_size": decoder.batch_size,
        "vocab_size": decoder.vocab_size,
        "context": decoder.context_limit,
        "litert_chunk": LITERT_CHUNK if fmt == "litert" else None,
        "state": {
            name: {"shape": list(shape), "dtype": dtype}
            for name, (shape, dtype) in decoder.layout.shapes().items()
        },
        "signatures": signatures,
    }


def export(
    model: Any,
    out: str | os.PathLike,
    context: int,
    fmt: str = "saved_model",
    batch_size: int = 1,
    sp_model: str | os.PathLike | None = None,
) -> Path:
    """Exports `model` (a PARTransformerXL with a fixed architecture) to the folder `out`.

    Args:
        model: the trained model.
        out: a folder that does not exist yet.
        context: tokens of XL memory or softmax cache in the state.
        fmt: "saved_model" (prefill, step, generate_ids, and generate with `sp_model`)
            or "litert" (prefill of LITERT_CHUNK tokens, step).
        batch_size: rows of the state.
        sp_model: the SentencePiece model of the text signature (SavedModel only).

    Raises:
        ExportError, UsageError: a model, setting or folder that cannot be used.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    out = Path(out)
    _check_out(out)
    if sp_model is not None and not Path(sp_model).is_file():
        raise UsageError(f"--sp_model {sp_model} does not exist; check the path")
    text = sp_model is not None and fmt == "saved_model"
    if text and batch_size != 1:
        raise ExportError(
            f"the text signature decodes one prompt: pass --batch_size 1 (got {batch_size})"
        )
    decoder = Decoder(model, context, batch_size, sp_model if text else None)
    with _folder_beside(out) as tmp:
        if fmt == "saved_model":
            signatures = _write_saved_model(decoder, tmp)
        else:
            signatures = _write_litert(decoder, tmp)
        shutil.copyfile(Path(__file__).with_name("standalone.py"), tmp / CLIENT_FILE)
        description = json.dumps(describe(decoder, fmt, signatures), indent=1)
        (tmp / DESCRIPTION_FILE).write_text(description, encoding="utf-8")
    return out


def _signature_of(function: Any) -> dict[str, list[str]]:
    inputs = [spec.name for spec in function.structured_input_signature[0]]
    return {"inputs": inputs, "outputs": sorted(function.structured_outputs)}


def _write_saved_model(decoder: Decoder, folder: Path) -> dict[str, Any]:
    import tensorflow as tf

    functions = {
        "prefill": decoder.decode_function(None),
        "step": decoder.decode_function(1),
        "generate_ids": decoder.generate_ids_function(),
    }
    if decoder.tokenizer is not None:
        functions["generate"] = decoder.generate_text_function(functions["generate_ids"])
    concrete = {name: fn.get_concrete_function() for name, fn in functions.items()}
    for name, fn in functions.items():
        setattr(decoder, f"{name}_fn", fn)
    tf.saved_model.save(decoder, str(folder), signatures=concrete)
    return {name: _signature_of(fn) for name, fn in concrete.items()}


def _write_litert(decoder: Decoder, folder: Path) -> dict[str, Any]:
    import tensorflow as tf

    concrete = {
        "prefill": decoder.decode_function(LITERT_CHUNK, check=False).get_concrete_function(),
        "step": decoder.decode_function(1, check=False).get_concrete_function(),
    }
    # Through a SavedModel of the two signatures, so the flatbuffer keeps their names.
    # The weights frozen into constants first: LiteRT would otherwise keep them as
    # resource variables that its interpreter leaves uninitialised.
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    frozen = {
        name: _named(convert_variables_to_constants_v2(fn), fn) for name, fn in concrete.items()
    }
    staging = folder / "staging_saved_model"
    tf.saved_model.save(tf.Module(), str(staging), signatures=frozen)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(staging), list(concrete))
    # Some TensorFlow ops have no LiteRT builtin; none is needed, so refuse them.
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    try:
        flatbuffer = converter.convert()
    except Exception as e:  # the converter's message is many lines: keep the first
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExportError(
            f"LiteRT cannot convert this model ({first}); export --format saved_model"
        ) from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    (folder / LITERT_FILE).write_bytes(flatbuffer)
    return {name: _signature_of(fn) for name, fn in concrete.items()}


def _named(frozen: Any, original: Any) -> Any:
    """A concrete function calling `frozen` (which returns a flat list) that returns the
    outputs of `original` by name again."""
    import tensorflow as tf

    names = tf.nest.flatten({name: name for name in original.structured_outputs})
    specs = original.structured_input_signature[0]

    def named(*inputs: Any) -> dict[str, Any]:
        return dict(zip(names, frozen(*inputs), strict=True))

    return tf.function(named, input_signature=list(specs), autograph=False).get_concrete_function()
