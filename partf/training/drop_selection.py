"""The training-free conversion: replace the attention blocks a trained model misses least.

`partf-train --init_from=RUN --drop_attention=N` scores the finished run on the
validation split as it is and with each attention block replaced by the identity ("What
Matters in Transformers?", He et al. 2024), keeps the N replacements that raised the
loss least and fine-tunes the rest: the no-search control of the conversions.
`--drop_attention_to=MECHANISM` scores and places that mechanism instead, its weights
copied as `init_from.init_weights` copies them (the rest drawn from the run's seed, so
the scores repeat). The choice is written to `checkpoints/<name>/selection.json`, which a
resume reads instead of scoring again (docs/training.md, "Starting from a trained model").
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from partf.atomic import atomic_write_text
from partf.attention import attention_names, get_attention_class
from partf.attention.registry import resolve_options
from partf.models.config import architecture_token
from partf.run_folder import RunFolder
from partf.serialization import FORMAT_KEY, KINDS, FormatError, check_format
from partf.training.config import ConfigError
from partf.training.init_from import chosen_candidates, init_weights, load_source

logger = logging.getLogger("partf.training")

#: What the chosen blocks become by default (`--drop_attention_to`): nothing.
IDENTITY = "identity"


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which attention blocks a drop run replaced, by what, and why.

    Attributes:
        source: the finished run's checkpoint folder.
        architecture: the fixed architecture the run trains ("I", or the mechanism's
            name, where a block was replaced), as long as the source's.
        dropped: the blocks replaced, in the order they were chosen.
        baseline_loss: the source's validation loss per token, every block kept.
        losses: per attention block of the source that was scored, the validation loss
            with that block alone replaced.
        mechanism: "identity" or an attention registry name (`--drop_attention_to`).
    """

    source: str
    architecture: str
    dropped: tuple[int, ...]
    baseline_loss: float
    losses: dict[int, float]
    mechanism: str = IDENTITY

    def to_dict(self) -> dict[str, Any]:
        losses = {str(b): loss for b, loss in self.losses.items()}
        record = {**dataclasses.asdict(self), "dropped": list(self.dropped), "losses": losses}
        return {FORMAT_KEY: KINDS["selection"].version, **record}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Selection:
        return cls(
            source=values["source"],
            architecture=values["architecture"],
            dropped=tuple(values["dropped"]),
            baseline_loss=float(values["baseline_loss"]),
            losses={int(b): float(loss) for b, loss in values["losses"].items()},
            mechanism=values["mechanism"],
        )


def source_architecture(source: Any) -> list[str]:
    """The source's blocks as architecture tokens (a search's most likely candidate)."""
    return [architecture_token(name) for name in chosen_candidates(source)]


def attention_mechanisms(source: Any) -> dict[int, str]:
    """The source's blocks whose chosen candidate is an attention: index -> its
    mechanism's registry name."""
    chosen = chosen_candidates(source)
    kinds = [
        block.kinds[block.candidates.index(name)]
        for block, name in zip(source.blocks, chosen, strict=True)
    ]
    return {b: mechanism for b, (kind, mechanism) in enumerate(kinds) if kind == "attention"}


def validation_loss(model: Any, split: Any, jit_compile: bool) -> float:
    """Mean validation loss per token (nats) of `model` on `split`, memory starting
    empty, with the console progress of any scored split."""
    from partf.training.evaluation.evaluators import make_evaluator
    from partf.training.evaluation.perplexity import score

    evaluator = make_evaluator(model, None, split.batch_size, jit_compile)
    tokens = split.batch_size * split.seq_len
    report = score(evaluator, split.dataset, "valid", split.num_batches, tokens)
    return float(report["loss"])


def mechanism_options(options: dict[str, Any], mechanism: str) -> dict[str, Any]:
    """The run's attention `options` (its `--attn_...` flags) as `mechanism` reads them,
    each written out as `<mechanism>_<option>`: what a replacing mechanism is built with,
    since the source was trained without it and holds none of its options."""
    if mechanism == IDENTITY:
        return {}
    resolved = resolve_options(options, [mechanism])
    own = (f"{mechanism}_{option}" for option in get_attention_class(mechanism).options)
    return {key: resolved[key] for key in own if key in resolved}


def dropped_variant(
    source: Any,
    folder: str | Path,
    architecture: str,
    seed: int = 0,
    options: dict[str, Any] | None = None,
) -> Any:
    """A fixed model of the source's settings with `architecture` (as many blocks as the
    source), its weights copied from the source by `init_weights`; the weights nothing
    is copied into (a replacing mechanism's own) are drawn after seeding every generator
    with `seed`, so that a variant scores the same every time it is built. `options`
    (a replacing mechanism's, from `mechanism_options`) go over the source's."""
    import keras

    from partf.models.par_transformer_xl import PARTransformerXL

    config = source.config.replace(
        architecture=architecture,
        num_layers=len(source.blocks),
        attention_options={**source.config.attention_options, **(options or {})},
    )
    keras.utils.set_random_seed(seed)
    model = PARTransformerXL(config, name="par_transformer_xl")
    model.build((config.batch_size, None))
    init_weights(model, folder, source)
    return model


def select_dropped(
    folder: str | Path,
    count: int,
    split: Any,
    jit_compile: bool,
    mechanism: str = IDENTITY,
    seed: int = 0,
    options: dict[str, Any] | None = None,
) -> Selection:
    """Scores the finished run in `folder` with each attention block replaced by
    `mechanism` and keeps the `count` replacements that raised the validation `split`'s
    loss least. A replacing mechanism's weights are copied from the source's attention
    where their names and shapes match (`init_from.init_weights`), the rest drawn from
    `seed` (the run's); it is built with the run's attention `options` (`--attn_...`:
    `--attn_local_window_size=16` with `local`), the source's blocks keep their own.

    Raises:
        ConfigError: `count` out of range (1 to the attention blocks that do not run
            `mechanism` already), a mechanism without a causal form, or no finished run
            in `folder`.
    """
    if mechanism != IDENTITY and not get_attention_class(mechanism).supports_causal:
        causal = [n for n in attention_names() if get_attention_class(n).supports_causal]
        raise ConfigError(
            f"--drop_attention_to={mechanism} has no causal form, so it cannot replace a "
            f"language model's attention; give identity or one of {', '.join(causal)}."
        )
    source = load_source(folder)
    # A place that runs the mechanism already would only score the source again.
    blocks = [b for b, name in attention_mechanisms(source).items() if name != mechanism]
    if not 1 <= count <= len(blocks):
        other = "" if mechanism == IDENTITY else f" other than {mechanism}"
        raise ConfigError(
            f"--drop_attention={count}, but the run in {folder} has {len(blocks)} attention "
            f"blocks{other}; give 1 to {len(blocks)}."
        )
    own_options = mechanism_options(options or {}, mechanism)
    token = architecture_token(mechanism)  # "I" for the identity
    verb = "dropped" if mechanism == IDENTITY else f"as {mechanism}"
    tokens = source_architecture(source)
    logger.info("--drop_attention: scoring %s on valid as it is", folder)
    baseline = validation_loss(source, split, jit_compile)
    losses = {}
    for b in blocks:
        variant = " ".join(token if i == b else t for i, t in enumerate(tokens))
        logger.info("--drop_attention: scoring with block %d %s (%s)", b, verb, variant)
        model = dropped_variant(source, folder, variant, seed, own_options)
        losses[b] = validation_loss(model, split, jit_compile)
    # The smallest rise first; ties go to the earlier block.
    chosen = tuple(sorted(blocks, key=lambda b: (losses[b], b))[:count])
    architecture = " ".join(token if i in chosen else t for i, t in enumerate(tokens))
    selection = Selection(str(folder), architecture, chosen, baseline, losses, mechanism)
    logger.info(
        "--drop_attention: valid loss %.4f as it is; %s; replacing block(s) %s by %s: %s",
        baseline,
        ", ".join(f"block {b} {verb} {loss:.4f}" for b, loss in losses.items()),
        ", ".join(map(str, chosen)),
        mechanism,
        architecture,
    )
    return selection


def read_selection(checkpoints: Path, mechanism: str | None = None) -> Selection | None:
    """The choice a run made before (its selection.json), or None.

    Raises:
        ConfigError: the file cannot be read, or it replaced the blocks by another
            mechanism than `mechanism` (when given): the run's architecture would not be
            the one `--drop_attention_to` asks for.
        FormatError: it is of another format (one line: both, and what to do).
    """
    path = RunFolder(checkpoints).selection_path
    if not path.is_file():
        return None
    try:
        values = json.loads(path.read_text())
        check_format(values, str(path), "selection")
        selection = Selection.from_dict(values)
    except FormatError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"cannot read {path} ({e}); pass --overwrite to choose the blocks again."
        ) from None
    if mechanism is not None and selection.mechanism != mechanism:
        raise ConfigError(
            f"{path} replaced the blocks by {selection.mechanism}, but this run asks "
            f"--drop_attention_to={mechanism}; resume it with "
            f"--drop_attention_to={selection.mechanism}, or pass --overwrite to choose again."
        )
    return selection


def write_selection(checkpoints: Path, selection: Selection) -> None:
    """Writes selection.json (atomically) into the run's checkpoint folder."""
    path = RunFolder(checkpoints).selection_path
    atomic_write_text(path, json.dumps(selection.to_dict(), indent=2) + "\n")
