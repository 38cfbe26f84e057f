"""ModelConfig: every setting of a PAR Transformer-XL, as plain values, named after the
original project's flags.

One flat dataclass, by design (it extends `BlockSettings`, so each setting is declared
once): nothing but the model takes an architecture, search or schedule part whole, the
checks cross such parts, and flags, plans and config.json name the settings flat.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from partf.attention import attention_names, get_attention_class
from partf.attention.registry import COMMON_ARGUMENTS
from partf.attention.registry import POSITIONS as MECHANISM_POSITIONS
from partf.layers.adaptive_softmax import tail_projection_dims, validate_cutoffs
from partf.layers.candidates import BUILTIN_CANDIDATES, noncausal_attention_names
from partf.layers.stochastic_block import BlockSettings
from partf.layers.temperature import validate_temperature
from partf.models.architecture import (  # noqa: F401  (re-exported: callers import them here)
    ARCHITECTURE_LETTERS,
    ARCHITECTURE_PRESETS,
    architecture_token,
    expand_architecture,
    is_searched_architecture,
    parse_architecture,
    parse_block_candidates,
)
from partf.serialization import check_complete
from partf.settings import setting

#: Fields only the data and the run's length know (vocabulary size, rows of the batch, the
#: steps tau anneals over).
DATA_FIELDS = ("vocab_size", "batch_size", "tau_steps")

#: How tokens learn where they are (see `ModelConfig.position`).
POSITIONS = (*MECHANISM_POSITIONS, "auto")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig(BlockSettings):
    """Settings of a `PARTransformerXL`, or with `causal=False` of the bidirectional
    `Encoder` (and `MaskedLanguageModel`, what objective mlm trains), which refuses what
    an encoder cannot do (causal-only attentions, the sampled or cost-aware search).

    The fields of `DATA_FIELDS` are None in a run's draft config (`TrainConfig.model`),
    before its data is read: such a config checks every setting but those that need them
    (cutoffs below the vocabulary size) and cannot build a model. Nor can one of
    `position="auto"`. `partf.training.resolve.resolve_model` resolves both with the data.

    Example:
        >>> config = ModelConfig(vocab_size=12000, cutoffs=(250, 2500))
        >>> ModelConfig.from_dict(config.to_dict()) == config
        True
    """

    # Fields declared with `setting` (here and in BlockSettings) are also partf-train
    # flags (partf/cli/flags.py): the flag's help and default are the field's.
    vocab_size: int | None  # number of token ids (0 is padding); from the data
    num_layers: int = setting(6, "stochastic blocks")
    cutoffs: tuple[int, ...] = setting(
        (250, 2500),
        "adaptive softmax cutoffs without the vocabulary size, repeatable or comma-separated "
        "(--cutoffs= for a plain softmax)",
    )
    proj_factor: int = setting(4, "tail cluster i projects to d_model/proj_factor**i")
    proj_dims: tuple[int, ...] | None = setting(
        None, "explicit tail projection widths, one per cluster (repeatable)"
    )
    tie_embeddings: bool = setting(False, "tie output and input embeddings (plain softmax)")
    candidates: tuple[str, ...] = setting(
        ("attention", "dense", "identity"), "per-block choices, comma-separated or repeated"
    )
    architecture: str | None = setting(
        None,
        "fixed architecture such as 'A A D D D I' (no search), searched blocks among "
        "the candidates joined by '|' ('A|I D|I ...': each such block its own search), or a "
        "preset: plain (A D A D ...), "
        "transnormer (diag then norm attention, dense between), primal_hybrid (softmax then "
        "one primal attention, dense between)",
    )
    tau_start: float = setting(1.0, "initial Gumbel temperature")
    tau_end: float = setting(0.1, "final Gumbel temperature (after tau_steps)")
    tau_schedule: str = setting(
        "exponential", "tau annealing: exponential, linear, cosine or constant"
    )
    search_estimator: str = setting(
        "mixture",
        "how a search trains: mixture (every candidate runs, Gumbel-softmax weights, the "
        "original's) or sampled (one candidate per block drawn from pi runs per step; the "
        "logits learn from a score-function estimate)",
        choices=("mixture", "sampled"),
    )
    search_cost_weight: float = setting(
        0.0,
        "lambda of the cost-aware search: adds lambda x the expected cost per token of the "
        "architecture drawn from pi to the loss, in the unit of --search_cost (forward "
        "MFLOPs, or dense blocks with time; 0: off)",
    )
    search_cost: str = setting(
        "flops",
        "the cost-aware search's cost: flops (forward MFLOPs per token, counted) or time "
        "(each candidate's forward-and-backward time per token over the dense block's, "
        "measured in the same passes on this machine at the run's batch shape when it "
        "begins, so the machine's load cancels; kept in cost_table.json beside it)",
        choices=("flops", "time"),
    )
    # search_cost "time": {candidate: time per token in dense blocks}, the run's measured
    # table (partf.training.cost_table fills it; a model keeps it, so its loss needs no file).
    candidate_costs: dict = dataclasses.field(default_factory=dict)
    position: str = setting(
        "none",
        "token positions: none; sinusoidal or learned (added to the embeddings); rotary "
        "(inside each attention that has a query-key product); auto (the measured best for "
        "the chosen mechanisms; relative attention keeps its own encoding)",
        choices=POSITIONS,
    )
    max_positions: int = setting(
        16384,
        "learned positions: rows of the table; a stream (one row of the context batch, an "
        "epoch long) must stay shorter",
    )
    tau_steps: int | None = 1  # steps over which tau anneals (the trainer sets the run's total)
    tau_is_trainable: bool = setting(False, "learn tau instead of following the schedule")
    batch_size: int | None = 32  # rows of the context batch; sizes the memory state

    def __post_init__(self) -> None:
        # Accept lists (from JSON or flags) and store tuples.
        for name in ("cutoffs", "proj_dims", "candidates"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        if self.proj_dims == ():
            object.__setattr__(self, "proj_dims", None)
        if not self.causal:  # the encoder: recorded with no XL memory, no adaptive softmax
            for name, value in (("mem_len", 0), ("cutoffs", ()), ("proj_dims", None)):
                object.__setattr__(self, name, value)
        super().__post_init__()  # the block's own checks
        # A preset is only a name for an architecture string: store the string.
        if isinstance(self.architecture, str):
            expanded = expand_architecture(self.architecture, self.num_layers)
            object.__setattr__(self, "architecture", expanded)
        self._validate()

    def _validate(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "d_ffn", "num_layers", "batch_size"):
            # A data field of None is checked once the data gives it.
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                "choose num_heads dividing d_model."
            )
        if self.mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {self.mem_len}.")
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate}.")
        if self.clamp_len is not None and self.clamp_len < 1:
            raise ValueError(f"clamp_len must be positive or None, got {self.clamp_len}.")
        validate_cutoffs(self.cutoffs, self.vocab_size)
        tail_projection_dims(self.d_model, len(self.cutoffs), self.proj_factor, self.proj_dims)
        if self.tie_embeddings and self.cutoffs:
            raise ValueError(
                "tie_embeddings works with a plain softmax only; set cutoffs=() or "
                "tie_embeddings=False."
            )
        if self.attention not in attention_names():
            raise ValueError(
                f"unknown attention {self.attention!r}; valid names: "
                f"{', '.join(attention_names())}."
            )
        if not self.candidates:
            raise ValueError("candidates is empty; e.g. ('attention', 'dense', 'identity').")
        for name in self.candidates:
            if name not in BUILTIN_CANDIDATES and name not in attention_names():
                raise ValueError(
                    f"unknown candidate {name!r}; use one of {', '.join(BUILTIN_CANDIDATES)} "
                    f"or an attention name: {', '.join(attention_names())}."
                )
        if self.architecture is not None:
            blocks = parse_block_candidates(self.architecture)
            if len(blocks) != self.num_layers:
                raise ValueError(
                    f"architecture {self.architecture!r} has {len(blocks)} blocks but "
                    f"num_layers={self.num_layers}; set num_layers={len(blocks)}."
                )
        if self.search_estimator == "sampled" and self.sample_per_example:
            raise ValueError(
                "search_estimator='sampled' runs one candidate per block for the whole batch; "
                "set sample_per_example=False."
            )
        if not self.search_cost_weight >= 0.0:
            raise ValueError(
                f"search_cost_weight must be >= 0 (0: off), got {self.search_cost_weight}."
            )
        object.__setattr__(
            self, "candidate_costs", {str(k): float(v) for k, v in self.candidate_costs.items()}
        )
        validate_temperature(self.tau_schedule, self.tau_start, self.tau_end, self.tau_steps)
        self._validate_position()
        if not self.causal:
            self._validate_noncausal()
        try:
            json.dumps(self.attention_options)
        except TypeError as error:
            raise ValueError(
                f"attention_options must hold plain JSON values, got {self.attention_options!r}."
            ) from error

    def _validate_noncausal(self) -> None:
        """What the bidirectional Encoder (causal=False, objective mlm) cannot do."""
        if self.architecture is None:
            blocks, where = self.candidates, "candidates"
        elif is_searched_architecture(self.architecture):
            raise ValueError(
                f"architecture {self.architecture!r} searches some blocks ('|'), which only the "
                "causal model can do; an Encoder (causal=False, objective mlm) searches every "
                "block over `candidates`: leave architecture unset."
            )
        else:
            blocks, where = parse_architecture(self.architecture), "architecture"
        for name in self.attention_mechanisms:
            if not get_attention_class(name).supports_noncausal:
                # "attention" stands for the attention field; a registry name is itself.
                given = " and ".join(
                    field
                    for field, used in (
                        ("attention", name == self.attention and "attention" in blocks),
                        (where, name in blocks),
                    )
                    if used
                )
                raise ValueError(
                    f"attention {name!r} (from {given}) is causal only and cannot be used in "
                    "an Encoder (causal=False, objective mlm); choose one with a non-causal "
                    f"form: {', '.join(noncausal_attention_names())}."
                )
        # The encoder's search trains the Gumbel-softmax mixture and has no cost term.
        if self.search_estimator != "mixture":
            raise ValueError(
                f"search_estimator={self.search_estimator} is for the causal model only; an "
                "Encoder (causal=False, objective mlm) searches with the mixture estimator: "
                "leave it at mixture."
            )
        if self.search_cost_weight:
            raise ValueError(
                "search_cost_weight is for the causal model only (an Encoder's search, "
                "causal=False or objective mlm, has no cost term): leave it at 0."
            )

    def _validate_position(self) -> None:
        if self.max_positions < 1:
            raise ValueError(f"max_positions must be >= 1, got {self.max_positions}.")
        if self.position != "rotary":
            return
        for name in self.attention_mechanisms:
            cls = get_attention_class(name)
            if not (cls.supports_rotary or cls.encodes_positions):
                raise ValueError(
                    f"position='rotary' is not defined for {name} attention (it has no "
                    "query-key dot product to rotate); use position sinusoidal or learned."
                )
        head_dim = self.attention_options.get("head_dim") or self.d_model // self.num_heads
        if head_dim % 2:
            raise ValueError(
                f"position='rotary' rotates pairs of features, so the head width must be even, "
                f"got {head_dim}; choose num_heads so that d_model / num_heads is even."
            )

    # ------------------------------------------------------------------- data
    def check_data(self) -> None:
        """Raises ValueError unless a model can be built from this config: its data fields
        set and its position chosen (both `resolve_model`'s, for a run)."""
        missing = [name for name in DATA_FIELDS if getattr(self, name) is None]
        if missing:
            raise ValueError(
                f"this ModelConfig has no {', '.join(missing)} yet (a run's model before its "
                "data is read); set them, or resolve it with "
                "partf.training.resolve.resolve_model."
            )
        if self.position == "auto":
            raise ValueError(
                "position 'auto' is chosen when a run resolves its model "
                "(partf.training.resolve.resolve_model); name the position (none, "
                "sinusoidal, learned or rotary) to build a model from this config."
            )

    # --------------------------------------------------------------- derived
    @property
    def attention_mechanisms(self) -> tuple[str, ...]:
        """Registry names of the attentions the model builds, in order of appearance."""
        names = [
            self.attention if name == "attention" else name
            for candidates in self.block_candidates
            for name in candidates
            if name not in ("dense", "identity")
        ]
        return tuple(dict.fromkeys(names))

    @property
    def recommended_position(self) -> str:
        """The position encoding `position="auto"` stands for with these mechanisms: the
        `recommended_position` their classes declare and share; none when they differ (one
        encoding serves the whole model), without attention, or with relative attention
        only."""
        wanted = {
            get_attention_class(name).recommended_position
            for name in self.attention_mechanisms
            if not get_attention_class(name).encodes_positions
        }
        return wanted.pop() if len(wanted) == 1 else "none"

    @property
    def block_settings(self) -> BlockSettings:
        """What every block of the stack shares (rotary positions are an attention option)."""
        fields = dataclasses.fields(BlockSettings)
        shared = {field.name: getattr(self, field.name) for field in fields}
        if self.position == "rotary":
            shared["attention_options"] = {**self.attention_options, "rotary": True}
        return BlockSettings(**shared)

    @property
    def absolute_positions(self) -> bool:
        """Whether positions are added to the embeddings (sinusoidal or learned)."""
        return self.position in ("sinusoidal", "learned")

    def check_attention_options(self, also: Sequence[str] = ()) -> None:
        """Raises ValueError for an attention option (`<option>` or `<mechanism>_<option>`)
        that no chosen mechanism takes; `also` names mechanisms the run builds besides its
        architecture's (`--drop_attention_to`'s). The model ignores such options (one set
        serves many mechanisms); the command line calls this to refuse a mistyped flag."""
        mechanisms = tuple(dict.fromkeys((*self.attention_mechanisms, *also)))
        valid = set(COMMON_ARGUMENTS) - {"name", "dtype"}
        for name in mechanisms:
            options = get_attention_class(name).options
            valid.update(options)
            valid.update(f"{name}_{option}" for option in options)
        for key in self.attention_options:
            if key not in valid:
                chosen = ", ".join(mechanisms) or "none"
                listed = ", ".join(sorted(valid - set(COMMON_ARGUMENTS))) or "none"
                raise ValueError(
                    f"attention option {key!r} (--attn_{key}) is taken by none of the chosen "
                    f"mechanisms ({chosen}); options they take: {listed}."
                )

    @property
    def block_candidates(self) -> tuple[tuple[str, ...], ...]:
        """Candidates of each block: the architecture's (one per fixed block, several
        per searched 'A|I' block), or `candidates` in every block."""
        if self.architecture is not None:
            return parse_block_candidates(self.architecture)
        return tuple(self.candidates for _ in range(self.num_layers))

    @property
    def is_stochastic(self) -> bool:
        """Whether some block searches (has architecture logits)."""
        return any(len(names) > 1 for names in self.block_candidates)

    @property
    def search_candidates(self) -> tuple[str, ...]:
        """The names a search's pi has columns for: `candidates`, or with searched blocks
        in `architecture` every name they use, in order of appearance."""
        if self.architecture is None:
            return self.candidates
        return tuple(dict.fromkeys(n for names in self.block_candidates for n in names))

    # ------------------------------------------------------------- plain dict
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (tuples become lists)."""
        values = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}

    @classmethod
    def from_dict(cls, values: dict[str, Any], saved: str | None = None) -> ModelConfig:
        """Inverse of `to_dict`; unknown keys raise ValueError. A missing field takes its
        default, except in a config read from a file (`saved` names it): there
        `partf.serialization.check_complete` refuses it (FormatError)."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown ModelConfig fields {unknown}; valid fields: {', '.join(sorted(known))}."
            )
        if saved is not None:
            check_complete(values, cls, saved)
        return cls(**values)

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, config: ModelConfig | dict[str, Any] | None, kwargs: dict[str, Any]) -> ModelConfig:
        """A task model's config: `config` (a ModelConfig, its dict, or None for the
        defaults) with the ModelConfig fields among `kwargs` over it. Those fields are
        taken out of `kwargs`; what is left is the Keras model's own (name, dtype)."""
        fields = {field.name for field in dataclasses.fields(cls)}
        settings = {key: kwargs.pop(key) for key in list(kwargs) if key in fields}
        if config is None:
            return cls(**settings)
        if isinstance(config, dict):
            return cls.from_dict({**config, **settings})
        return config.replace(**settings) if settings else config
