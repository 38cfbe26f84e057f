"""Finding a trained model and its tokenizer for the commands over a trained model.

`--model` names a `.keras` file or a run's checkpoint folder (its .keras file, else its
newest checkpoint rebuilt from config.json); the tokenizer is `--sp_model` or the one
config.json names. Failures raise `UsageExit` (exit status 2) or `RuntimeExit` (1).
Keras is imported only when a model is loaded, so `--help` stays fast.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from partf.errors import DataError
from partf.run_folder import RunFolder, RunFolderError

logger = logging.getLogger(__name__)


#: A run folder without a model in it.
_NO_MODEL = (
    "{run_dir} holds no .keras file and no checkpoint; pass a .keras file or a "
    "run's checkpoints/<model_name> folder"
)


class UsageExit(Exception):
    """A command-line mistake: printed on one line, exit status 2."""


class RuntimeExit(Exception):
    """A failure while running: printed on one line, exit status 1."""


def _read_run_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's config.json ({"format": ..., "model": ..., "training": ...}), or None if
    absent; one unreadable or of another partf format is refused (`RuntimeExit`)."""
    folder = RunFolder(run_dir)
    if not folder.config_path.is_file():
        return None
    try:
        return folder.read_config()
    except DataError as e:  # unreadable, or another format
        raise RuntimeExit(str(e)) from None


def _load_keras(path: Path) -> Any:
    import zipfile

    import keras

    import partf.models  # noqa: F401  (registers the classes the file names)
    from partf.models import PARTransformerXL
    from partf.serialization import FormatError

    if not zipfile.is_zipfile(path):
        # Keras answers "File not found" for a damaged archive; say what is wrong instead.
        raise RuntimeExit(
            f"cannot load {path}: not a readable .keras file (truncated or corrupt); pass another "
            "--model, or the run's checkpoints/<model_name> folder to use its newest checkpoint"
        )
    try:
        model = keras.saving.load_model(path, compile=False)
    except FormatError as e:  # another partf format: which, and what to do
        raise RuntimeExit(f"cannot load {path}: {e}") from e
    except Exception as e:  # a damaged member, another Keras version, a foreign file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeExit(
            f"cannot load {path}: {first}; if another partf or Keras version wrote it, load "
            "it with that version, or pass the run's checkpoints/<model_name> folder to use "
            "its newest checkpoint"
        ) from e
    if type(model).__name__ == "MaskedLanguageModel":
        raise UsageExit(_masked_lm_refusal(path))
    if not isinstance(model, PARTransformerXL):
        raise UsageExit(f"{path} holds a {type(model).__name__}, not a partf PARTransformerXL")
    return model


def _masked_lm_refusal(path: Path) -> str:
    """Why an --objective=mlm run is not scored here, and where its figures are."""
    return (
        f"{path} holds a masked language model (partf-train --objective=mlm); partf-evaluate "
        "and partf-generate take causal models only: its exact masked-token perplexity is in "
        "the run's results.json"
    )


def _load_checkpoint(run_dir: Path, run_config: dict[str, Any] | None) -> Any:
    from partf.models import ModelConfig, PARTransformerXL
    from partf.run_folder import CheckpointError
    from partf.serialization import FormatError
    from partf.training.checkpoint import restore_variables, saved_paths, saved_root

    folder = RunFolder(run_dir)
    try:
        found = folder.newest_checkpoint("pass the run's .keras file or another checkpoint folder")
    except CheckpointError as e:  # none reads back, or another format
        raise RuntimeExit(str(e)) from e
    if found is None:
        raise UsageExit(_NO_MODEL.format(run_dir=run_dir))
    groups, meta, path = found
    training = (run_config or {}).get("training") or meta.get("config", {}).get("training") or {}
    if training.get("objective") == "mlm":
        raise UsageExit(_masked_lm_refusal(run_dir))
    model_fields, source = (run_config or {}).get("model"), folder.config_path
    if not model_fields:
        model_fields, source = meta.get("config", {}).get("model"), f"checkpoint {path}"
    if not model_fields:
        raise RuntimeExit(f"{path} has no model configuration and {run_dir} no config.json")
    try:
        config = ModelConfig.from_dict(model_fields, saved=f"{source} (model settings)")
    except FormatError as e:  # a field missing
        raise RuntimeExit(str(e)) from e
    model = PARTransformerXL(config, name=run_dir.name)
    try:
        restore_variables(
            model.variables,
            groups["model"],
            "model",
            saved_paths(meta, "model"),
            root=model.name,
            saved_model_root=saved_root(meta),
        )
    except CheckpointError as e:
        raise RuntimeExit(f"cannot restore {path}: {e}") from e
    except KeyError as e:
        raise RuntimeExit(
            f"cannot restore {path}: it holds no {e} record (not a partf-train checkpoint); "
            "pass the run's .keras file or another checkpoint folder"
        ) from e
    logger.info("loaded checkpoint %s (step %s)", path, meta.get("step"))
    return model


def model_file(path: str | os.PathLike) -> Path | None:
    """The `.keras` file `--model` names, or None for a run folder without one (its
    newest checkpoint is used then); checked without importing Keras or TensorFlow, so
    a wrong path is answered at once. UsageExit when the path does not exist, holds
    several .keras files, or is a folder with neither a .keras file nor a checkpoint.
    """
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise UsageExit(
            f"--model {path} does not exist; pass a .keras file or a run's "
            "checkpoints/<model_name> folder"
        )
    folder = RunFolder(path)
    try:
        found = folder.find_model_file()
    except RunFolderError as e:
        raise UsageExit(str(e)) from None
    if found is None and not folder.checkpoints():
        raise UsageExit(_NO_MODEL.format(run_dir=path))
    return found


def load_model(path: str | os.PathLike) -> tuple[Any, Path]:
    """(the PARTransformerXL, the folder where the run's config.json would be) of a
    `.keras` file or checkpoints/<model_name> (its <model_name>.keras or only .keras
    file, else its newest checkpoint rebuilt from config.json). UsageExit when the path
    does not exist or holds no model; RuntimeExit when the model file cannot be read."""
    path = Path(path)
    found = model_file(path)
    if found is not None:
        return _load_keras(found), path.parent if path.is_file() else path
    return _load_checkpoint(path, _read_run_config(path)), path


def find_sp_model(explicit: str | None, run_dir: Path) -> Path:
    """The SentencePiece model: --sp_model, or the one the run's config.json names.

    A relative path from config.json is tried from the current folder, then
    from the run folder and each folder above it (training may have run
    anywhere above its output).
    """
    from partf.data import model_path

    if explicit:
        path = model_path(explicit)
        if not path.is_file():
            raise UsageExit(f"--sp_model {path} does not exist; check the path")
        return path
    config = _read_run_config(run_dir)
    prefix = ((config or {}).get("training") or {}).get("sp_model_prefix")
    if not prefix:
        raise UsageExit(
            f"no tokenizer given and no config.json naming one beside the model in {run_dir}; "
            "pass --sp_model path/to/tokenizer.model"
        )
    relative = model_path(prefix)
    above = (run_dir.resolve(), *run_dir.resolve().parents)
    # An absolute path joined to a folder stays itself.
    for candidate in (relative, *(folder / relative for folder in above)):
        if candidate.is_file():
            return candidate
    raise UsageExit(
        f"the run's tokenizer {relative} was not found from here or above {run_dir}; "
        "pass --sp_model path/to/tokenizer.model"
    )
