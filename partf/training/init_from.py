"""Starting a run from a finished run's weights: `partf-train --init_from=RUN`.

`init_weights` copies the finished run's weights into a freshly built model wherever the
block types match: the embedding, the output layer and a learned position table; in each
block, every candidate of a kind the source block has (with its LayerNorm); an attention
of another mechanism takes the source attention's weights of the same name and shape.
Blocks align by index, or, when the target has fewer (a derived architecture), with the
source's blocks that did not choose the identity. Architecture logits, temperature, step,
XL memory and optimizer start fresh (docs/training.md, "Starting from a trained model").
"""

from __future__ import annotations

import dataclasses
import logging
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from partf.run_folder import RunFolder, RunFolderError
from partf.serialization import FormatError
from partf.training.config import ConfigError

logger = logging.getLogger("partf.training")


@dataclasses.dataclass(frozen=True)
class InitReport:
    """What `init_weights` copied from the `source` run's `.keras` file: the `shared`
    layers outside the blocks (embedding, output layer, position table); one line per
    target block (`blocks`: its source block and, per candidate, what it took, "fresh"
    where nothing matched); the target blocks none of whose weights were copied
    (`fresh_blocks`; the identity, which has none, excepted)."""

    source: str
    shared: tuple[str, ...]
    blocks: tuple[str, ...]
    fresh_blocks: tuple[int, ...]

    def describe(self) -> str:
        """The report as log lines."""
        lines = [f"--init_from {self.source}: {', '.join(self.shared) or 'no shared layer'}"]
        lines += [f"  {line}" for line in self.blocks]
        if self.fresh_blocks:
            lines.append(f"  blocks starting fresh: {', '.join(map(str, self.fresh_blocks))}")
        return "\n".join(lines)


def source_model_path(folder: str | Path) -> Path:
    """The `.keras` file of the finished run whose checkpoints are in `folder`.

    Raises:
        ConfigError: no finished run there (no results.json or no .keras file).
        FormatError: its results.json is of another partf format.
    """
    run = RunFolder(folder)
    try:
        run.read_results(f"--init_from {folder}: its results.json")
    except RunFolderError:
        raise ConfigError(
            f"--init_from {folder}: no finished run there (needs the results.json and "
            "<name>.keras that a completed partf-train run writes in checkpoints/NAME)."
        ) from None
    try:
        path = run.find_model_file()
    except RunFolderError as e:
        raise ConfigError(f"--init_from {folder}: {e}") from None
    if path is None or not zipfile.is_zipfile(path):
        name = (path or run.model_file).name
        raise ConfigError(
            f"--init_from {folder}: {name} is missing or unreadable; let the run finish "
            "(partf-train writes it last) or give another run."
        )
    return path


def load_source(folder: str | Path) -> Any:
    """The finished run's model (a `PARTransformerXL`), loaded from its `.keras` file."""
    import keras

    import partf.models  # noqa: F401  (registers the classes the file names)

    path = source_model_path(folder)
    try:
        model = keras.saving.load_model(path, compile=False)
    except FormatError as e:
        raise FormatError(f"--init_from {folder}: {e}") from None
    if not hasattr(model, "blocks") or not getattr(model.config, "causal", False):
        raise ConfigError(
            f"--init_from {folder}: {path.name} holds a {type(model).__name__}; only a causal "
            "language model (PARTransformerXL) can start another run."
        )
    return model


def chosen_candidates(model: Any) -> list[str]:
    """Per block, the candidate it runs: the only one of a fixed block, the most likely
    of a searched one."""
    return [block.candidates[int(np.argmax(np.asarray(block.pi())))] for block in model.blocks]


def block_alignment(source: Any, target: Any) -> list[int]:
    """Per target block, the source block it starts from.

    Raises:
        ConfigError: the block counts cannot be aligned (see the module docstring).
    """
    n_source, n_target = len(source.blocks), len(target.blocks)
    if n_source == n_target:
        return list(range(n_target))
    kept = [i for i, name in enumerate(chosen_candidates(source)) if name != "identity"]
    if len(kept) == n_target:
        return kept
    raise ConfigError(
        f"--init_from: the source run has {n_source} blocks ({len(kept)} not the identity) "
        f"and this model {n_target}; give this run as many blocks as the source has, or as "
        "many as it kept (its derived architecture)."
    )


def _copy_matching(sources: dict[str, Any], targets: dict[str, Any]) -> list[str]:
    """Assigns each target variable the source variable of the same name and shape;
    returns the names copied."""
    copied = []
    for name, variable in targets.items():
        match = sources.get(name)
        if match is not None and tuple(match.shape) == tuple(variable.shape):
            variable.assign(match.value)
            copied.append(name)
    return copied


def _layer_weights(block: Any, layer: Any) -> dict[str, Any]:
    """A layer's trainable weights by their path inside it ("query/kernel", "gamma")."""
    inside = f"{block.name}/{layer.name}/"
    return {v.path.split(inside, 1)[-1]: v for v in layer.trainable_weights}


def _copy_block(source_block: Any, target_block: Any) -> tuple[str, bool]:
    """Copies each target candidate's weights from the source block; returns the log
    line's candidates part and whether anything was copied."""
    parts, any_copied = [], False
    for index, (kind, mechanism) in enumerate(target_block.kinds):
        label = mechanism or kind
        if kind == "identity":
            parts.append("identity")
            continue
        same = [
            i for i, k in enumerate(source_block.kinds) if k == (kind, mechanism)
        ] or [  # another attention mechanism: its projections
            i for i, (k, _) in enumerate(source_block.kinds) if k == kind == "attention"
        ]
        if not same:
            parts.append(f"{label} fresh")
            continue
        j = same[0]
        own = _layer_weights(target_block, target_block.sublayers[index])
        copied = _copy_matching(_layer_weights(source_block, source_block.sublayers[j]), own)
        norm = _copy_matching(
            _layer_weights(source_block, source_block.norms[j]),
            _layer_weights(target_block, target_block.norms[index]),
        )
        source_label = source_block.kinds[j][1] or source_block.kinds[j][0]
        if not copied and not norm:
            parts.append(f"{label} fresh")
            continue
        any_copied = True
        if source_block.kinds[j] == target_block.kinds[index]:
            parts.append(f"{label} from {source_label}")
        else:
            fresh = sorted(set(own) - set(copied))
            note = f" ({', '.join(copied)} copied" + (
                f"; {', '.join(fresh)} fresh)" if fresh else ")"
            )
            parts.append(f"{label} from {source_label}{note}")
    return ", ".join(parts), any_copied


def _outside_blocks(model: Any) -> dict[str, Any]:
    """The trainable weights outside the blocks, by path below the model's root: the
    embedding, the output layer and a learned position table."""
    outside = {}
    for variable in model.trainable_weights:
        path = variable.path
        if "/block_" in f"/{path}" or "arch_logits" in path or "temperature" in path:
            continue
        outside[path.split("/", 1)[-1]] = variable
    return outside


def init_weights(model: Any, folder: str | Path, source: Any | None = None) -> InitReport:
    """Copies the weights of the finished run in `folder` (checkpoints/NAME) into the
    freshly built `model` where the block types match (see the module docstring) and says
    what it copied; `source` is that run's model when the caller has loaded it already.

    Raises:
        ConfigError: no finished causal run in `folder`, another vocabulary or width, or
            block counts that cannot be aligned.
    """
    if source is None:
        source = load_source(folder)
    for field in ("vocab_size", "d_model"):
        have, want = getattr(source.config, field), getattr(model.config, field)
        if have != want:
            raise ConfigError(
                f"--init_from {folder}: the source's {field} is {have} but this run's {want}; "
                "start from a run of the same data and width."
            )
    alignment = block_alignment(source, model)
    shared = _copy_matching(_outside_blocks(source), _outside_blocks(model))
    layers = sorted({name.rsplit("/", 1)[0] for name in shared})
    lines, fresh = [], []
    for t, s in enumerate(alignment):
        source_block, target_block = source.blocks[s], model.blocks[t]
        line, copied = _copy_block(source_block, target_block)
        lines.append(f"block {t} <- block {s}: {line}")
        if not copied and any(kind != "identity" for kind, _ in target_block.kinds):
            fresh.append(t)
    report = InitReport(
        source=str(source_model_path(folder)),
        shared=tuple(layers),
        blocks=tuple(lines),
        fresh_blocks=tuple(fresh),
    )
    logger.info("%s", report.describe())
    return report
