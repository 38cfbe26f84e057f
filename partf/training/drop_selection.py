"""The training-free conversion: drop the attention blocks a trained model misses least.

`partf-train --init_from=RUN --drop_attention=N` scores the finished run on the
validation split once as it is and once with each of its attention blocks replaced by
the identity (no training; "What Matters in Transformers?", He et al. 2024, drop the
layers whose removal changes the model least), keeps the N whose removal raised the
validation loss least as identity blocks, and fine-tunes the rest from the run's weights.
It is the no-search control of the conversions: the same fine-tune as a converted search,
with the blocks chosen by a rule instead of by pi.

The choice is written to `checkpoints/<name>/selection.json`, which a resumed run reads
instead of scoring again, so the run resumes into the architecture it started with.

Example:
    >>> selection = select_dropped(source, 2, data.valid, jit_compile=True)
    >>> selection.architecture    # e.g. "A D I D I D"
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from partf.training.config import ConfigError

logger = logging.getLogger("partf.training")

#: The file in the run's checkpoint folder that holds the choice.
SELECTION_FILE = "selection.json"


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which attention blocks a drop run removed, and why.

    Attributes:
        source: the finished run's checkpoint folder.
        architecture: the fixed architecture the run trains ("I" where a block was
            dropped), as long as the source's.
        dropped: the blocks dropped, in the order they were chosen.
        baseline_loss: the source's validation loss per token, every block kept.
        losses: per attention block of the source, the validation loss with that block
            alone replaced by the identity.
    """

    source: str
    architecture: str
    dropped: tuple[int, ...]
    baseline_loss: float
    losses: dict[int, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "architecture": self.architecture,
            "dropped": list(self.dropped),
            "baseline_loss": self.baseline_loss,
            "losses": {str(b): loss for b, loss in self.losses.items()},
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Selection:
        return cls(
            source=values["source"],
            architecture=values["architecture"],
            dropped=tuple(values["dropped"]),
            baseline_loss=float(values["baseline_loss"]),
            losses={int(b): float(loss) for b, loss in values["losses"].items()},
        )


def source_architecture(source: Any) -> list[str]:
    """The source's blocks as architecture tokens (a search's most likely candidate)."""
    from partf.models.config import architecture_token
    from partf.training.init_from import chosen_candidates

    return [architecture_token(name) for name in chosen_candidates(source)]


def attention_blocks(source: Any) -> list[int]:
    """Indices of the source's blocks whose chosen candidate is an attention."""
    from partf.training.init_from import chosen_candidates

    chosen = chosen_candidates(source)
    return [
        b
        for b, (block, name) in enumerate(zip(source.blocks, chosen, strict=True))
        if block.kinds[block.candidates.index(name)][0] == "attention"
    ]


def validation_loss(model: Any, split: Any, jit_compile: bool) -> float:
    """Mean validation loss per token (nats) of `model` on `split`, memory starting
    empty, with the console progress of any scored split."""
    from partf.training.evaluation.evaluators import make_evaluator
    from partf.training.evaluation.perplexity import score

    evaluator = make_evaluator(model, None, split.batch_size, jit_compile)
    tokens = split.batch_size * split.seq_len
    report = score(evaluator, split.dataset, "valid", split.num_batches, tokens)
    return float(report["loss"])


def dropped_variant(source: Any, folder: str | Path, architecture: str) -> Any:
    """A fixed model of the source's settings with `architecture` (as many blocks as the
    source), its weights copied from the source by `init_weights`."""
    from partf.models.par_transformer_xl import PARTransformerXL
    from partf.training.init_from import init_weights

    config = source.config.replace(architecture=architecture, num_layers=len(source.blocks))
    model = PARTransformerXL(config, name="par_transformer_xl")
    model.build((config.batch_size, None))
    init_weights(model, folder, source)
    return model


def select_dropped(folder: str | Path, count: int, split: Any, jit_compile: bool) -> Selection:
    """Scores the finished run in `folder` with each attention block dropped and keeps
    the `count` drops that raised the validation loss least.

    Args:
        folder: the finished run's checkpoint folder.
        count: attention blocks to drop (at least 1, at most as many as it has).
        split: the validation split.
        jit_compile: compile the scoring passes.

    Raises:
        ConfigError: `count` out of range, or no finished run in `folder`.
    """
    from partf.training.init_from import load_source

    source = load_source(folder)
    blocks = attention_blocks(source)
    if not 1 <= count <= len(blocks):
        raise ConfigError(
            f"--drop_attention={count}, but the run in {folder} has {len(blocks)} attention "
            f"blocks; give 1 to {len(blocks)}."
        )
    tokens = source_architecture(source)
    logger.info("--drop_attention: scoring %s on valid as it is", folder)
    baseline = validation_loss(source, split, jit_compile)
    losses = {}
    for b in blocks:
        dropped = " ".join("I" if i == b else t for i, t in enumerate(tokens))
        logger.info("--drop_attention: scoring with block %d dropped (%s)", b, dropped)
        losses[b] = validation_loss(dropped_variant(source, folder, dropped), split, jit_compile)
    # The smallest rise first; ties go to the earlier block.
    chosen = tuple(sorted(blocks, key=lambda b: (losses[b], b))[:count])
    architecture = " ".join("I" if i in chosen else t for i, t in enumerate(tokens))
    selection = Selection(str(folder), architecture, chosen, baseline, losses)
    logger.info(
        "--drop_attention: valid loss %.4f as it is; %s; dropping block(s) %s: %s",
        baseline,
        ", ".join(f"block {b} dropped {loss:.4f}" for b, loss in losses.items()),
        ", ".join(map(str, chosen)),
        architecture,
    )
    return selection


def read_selection(checkpoints: Path) -> Selection | None:
    """The choice a run made before (its selection.json), or None."""
    path = checkpoints / SELECTION_FILE
    if not path.is_file():
        return None
    try:
        return Selection.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"cannot read {path} ({e}); pass --overwrite to choose the blocks again."
        ) from None


def write_selection(checkpoints: Path, selection: Selection) -> None:
    """Writes selection.json (atomically) into the run's checkpoint folder."""
    from partf.training.atomic import atomic_write_text

    atomic_write_text(
        checkpoints / SELECTION_FILE, json.dumps(selection.to_dict(), indent=2) + "\n"
    )
