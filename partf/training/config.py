"""The training configuration: one frozen dataclass of plain values.

The model's own settings live in `partf.models.config.ModelConfig`: `TrainConfig.model`
is its draft: `partf.training.resolve.resolve_model` makes it with the TrainConfig (from
the model fields given and the presets of `search` and `objective`, without the fields
the data and the run's length give) and completes it once the data is read.
`config.json`, every checkpoint and `results.json` store the resolved model config once,
beside `training_dict()`, the training settings without the draft.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from partf.attention import attention_names
from partf.errors import ConfigError
from partf.models.config import ModelConfig
from partf.serialization import check_complete
from partf.settings import setting, unknown_choice
from partf.training.lr_schedules import SCHEDULES
from partf.training.optimizer import OPTIMIZERS
from partf.training.resolve import resolve_model

#: Values of `TrainConfig.distribution_strategy` (see partf.training.distribution).
DISTRIBUTION_STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")

#: Values of `TrainConfig.objective`: next-token prediction with the PAR Transformer-XL,
#: or masked language modelling with the bidirectional encoder (partf.models.masked_lm).
OBJECTIVES = ("causal", "mlm")

#: Values of `TrainConfig.spike_guard` (see partf.training.spike_guard).
SPIKE_GUARDS = ("off", "skip", "stop")

#: Architecture-search presets: the settings of the architecture logits' own optimizer
#: each one stands for (see `TrainConfig.arch_settings`). "original" shares the model's
#: optimizer, as the original project did, and (for the causal model) takes its clipped
#: probabilities as the architecture parameters (`TrainConfig.__post_init__`).
#: "par" is what made the search converge at the base configuration (docs/search.md):
#: Adam at 3e-2 with the paper's weight decay, frozen for the first half of the run so
#: that attention has learned something before the logits judge it.
SEARCH_PRESETS: dict[str, dict[str, float]] = {
    "original": {},
    "par": {"arch_lr": 3e-2, "arch_weight_decay": 5e-4, "arch_freeze_fraction": 0.5},
}

#: The --help sections of the training flags (`group` of each setting).
DATA, OPTIMIZATION, RUN = "data", "optimization", "run"

#: Folder prefix of the default records (WikiText-2, batches of 32 x 32 tokens).
_RECORDS = "data/wikitext2_bsz32_seqlen32_tfrecords"

#: Training fields that do not change the numbers a run computes: a run may resume
#: with different values of these (a run folder renamed or moved is the same run).
RESUMABLE_CHANGES = (
    "model_name",
    "train_directory",
    "valid_directory",
    "test_directory",
    "sp_model_prefix",
    "mix_directory",
    "recall_directory",
    "output_dir",
    "log_every",
    "eval_every",
    "ckpt_every",
    "ckpt_min_seconds",
    "plot_every",
    "keep_checkpoints",
    "steps_per_execution",
    "jit_compile",
    "compiled_loop",
    "overwrite",
    # Read only when a run starts (a resume reads its checkpoint); a moved source folder
    # is the same source.
    "init_from",
)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything about a run: the training settings, and the model's in `model`.

    Paths are strings so the configuration stays JSON-safe.
    """

    # Each field declared with `setting` is also a partf-train flag (partf/cli/flags.py),
    # shown in the --help section its `group` names.
    # Data
    train_directory: str = setting(f"{_RECORDS}_train", "folder of training .tfrecords", group=DATA)
    valid_directory: str = setting(
        f"{_RECORDS}_valid", "folder of validation .tfrecords ('' to skip validation)", group=DATA
    )
    test_directory: str = setting(
        f"{_RECORDS}_test", "folder of test .tfrecords ('' to skip the test)", group=DATA
    )
    sp_model_prefix: str = setting(
        "data/tokenizer/wiki2_12k",
        "SentencePiece model prefix; gives the vocabulary size when the records carry no "
        "metadata.json",
        group=DATA,
    )
    # Recall beside perplexity (partf.training.mixing): an MQAR split mixed into the text
    # stream, and one scored by its answers at the end (issue 65).
    mix_directory: str | None = setting(
        None,
        "an MQAR split (partf-build-data --task=mqar, built with the records' --batch_size "
        "and --seq_len) whose batches go between the training batches, one after every "
        "--mix_every; its keys and values are used as token ids of the text's vocabulary",
        group=DATA,
        metavar="DIR",
    )
    mix_every: int = setting(
        1, "with --mix_directory: text batches before each MQAR batch (1: half of them)", group=DATA
    )
    recall_directory: str | None = setting(
        None,
        "an MQAR split scored at the end by its answers (accuracy beside the loss, "
        "results.json 'recall'), with the records' batch shape",
        group=DATA,
        metavar="DIR",
    )
    # Where results go: <output_dir>/{logs,checkpoints,plots}/<model_name>; partf-train
    # names a run after the current time unless --model_name is given.
    model_name: str = setting("partf", "name of the run's logs, checkpoints and plots", group=RUN)
    output_dir: str = setting(".", "root of logs/, checkpoints/, plots/", group=RUN)
    # Length of the run
    epochs: int = setting(20, "passes over the training data", group=OPTIMIZATION)
    max_steps: int | None = setting(
        None, "stop after this many steps (default: all)", group=OPTIMIZATION
    )
    objective: str = setting(
        "causal",
        "causal (next-token prediction, the PAR Transformer-XL) or mlm (masked language "
        "modelling with the bidirectional Encoder: 15% of tokens chosen, 80/10/10 "
        "mask/random/keep; needs records built with partf-build-data --mask_symbol; "
        "without --architecture a PAR search over non-causal candidates; mem_len, cutoffs "
        "and the sampled or cost-aware search do not apply)",
        group=OPTIMIZATION,
        choices=OBJECTIVES,
    )
    # Optimization
    max_lr: float = setting(1e-4, "peak learning rate", group=OPTIMIZATION)
    warmup_steps: int = setting(4000, "linear warm-up steps", group=OPTIMIZATION)
    lr_schedule: str = setting(
        "cosine",
        "cosine (warm-up then cosine to zero), inverse_sqrt or constant",
        group=OPTIMIZATION,
    )
    opt_name: str = setting("adam", "Keras optimizer name", group=OPTIMIZATION)
    clipvalue: float = setting(
        0.0, "clip gradient elements to +-clipvalue (0: none)", group=OPTIMIZATION
    )
    weight_decay: float | None = setting(
        None, "decoupled weight decay (default: the optimizer's)", group=OPTIMIZATION
    )
    arch_lr: float | None = setting(
        None,
        "own learning rate of the architecture logits (PAR paper: 1e-2; default: shared)",
        group=OPTIMIZATION,
    )
    arch_weight_decay: float | None = setting(
        None,
        "own weight decay of the architecture logits (PAR paper: 5e-4; default: shared)",
        group=OPTIMIZATION,
    )
    arch_freeze_steps: int = setting(
        0, "steps before the architecture logits learn (PAR paper: 10000)", group=OPTIMIZATION
    )
    arch_freeze_fraction: float | None = setting(
        None,
        "fraction of the run before the architecture logits learn (overrides "
        "--arch_freeze_steps; --search=par: 0.5)",
        group=OPTIMIZATION,
    )
    search: str = setting(
        "original",
        "architecture-search preset: original (the original project's: its clipped "
        "probabilities, --arch_parameterization=probabilities, sharing the model's optimizer) "
        "or par (own rate 3e-2, weight decay 5e-4, frozen for the first "
        "half of the run: the settings that converge, README 'The PAR search'); --arch_* "
        "flags given win",
        group=OPTIMIZATION,
        choices=tuple(SEARCH_PRESETS),
    )
    # Starting from a trained model (partf.training.init_from, partf.training.drop_selection)
    init_from: str | None = setting(
        None,
        "start from the weights of a finished run (its checkpoints/NAME folder) wherever the "
        "block types match: a fine-tune, a conversion or a search begun from a trained "
        "model; blocks align by index, or with the source's non-identity blocks when this "
        "model has fewer; a resumed run reads its own checkpoint instead",
        group=OPTIMIZATION,
    )
    drop_attention: int = setting(
        0,
        "with --init_from: replace by the identity the N attention blocks of the source "
        "whose removal raises its validation loss least (scored without training), then "
        "train the rest from its weights (0: off)",
        group=OPTIMIZATION,
    )
    drop_attention_to: str = setting(
        "identity",
        "with --drop_attention: what the chosen blocks become, identity or an attention "
        "mechanism (e.g. norm, linear) that takes the source attention's projections; each "
        "block is scored with that mechanism in its place",
        group=OPTIMIZATION,
        metavar="MECHANISM",
    )
    # Execution
    steps_per_execution: int = setting(32, "train steps per compiled call", group=RUN)
    jit_compile: bool = setting(True, "compile the train step with XLA", group=RUN)
    compiled_loop: bool = setting(
        False,
        "JAX: run each call's --steps_per_execution steps as one compiled loop "
        "(jax.lax.scan) instead of Keras's Python loop of compiled steps",
        group=RUN,
    )
    mixed_precision: bool = setting(False, "float16 (GPU) / bfloat16 (CPU) compute", group=RUN)
    seed: int = setting(0, "random seed (weights, dropout and Gumbel noise)", group=RUN)
    distribution_strategy: str = setting(
        "default",
        "tf.distribute strategy: mirrored (local devices), multi_worker (TF_CONFIG), tpu; each "
        "replica keeps its own rows and memory (docs/scaling.md)",
        group=RUN,
        choices=DISTRIBUTION_STRATEGIES,
    )
    # Monitoring and checkpoints
    log_every: int = setting(100, "steps between logged losses and TensorBoard scalars", group=RUN)
    eval_every: int = setting(0, "steps between validations (0: each epoch)", group=RUN)
    ckpt_every: int = setting(0, "steps between checkpoints (0: each epoch)", group=RUN)
    ckpt_min_seconds: float = setting(
        0.0,
        "least seconds between two --ckpt_every checkpoints, for a plan shared by slow and "
        "fast machines (0: no limit; epoch ends and signals always save)",
        group=RUN,
    )
    plot_every: int = setting(1000, "steps between pi heatmaps", group=RUN)
    keep_checkpoints: int = setting(5, "how many newest checkpoints to keep", group=RUN)
    overwrite: bool = setting(
        False,
        "discard this model_name's logs, checkpoints and plots instead of resuming",
        group=RUN,
    )
    # Loss-spike guard (partf.training.spike_guard)
    spike_guard: str = setting(
        "off",
        "a step whose loss is a spike (> --spike_factor x running mean, or NaN): skip it, or "
        "stop the run; counted in training.log and TensorBoard",
        group=RUN,
        choices=SPIKE_GUARDS,
    )
    spike_factor: float = setting(2.0, "loss spike threshold over the mean", group=RUN)
    spike_warmup: int = setting(100, "steps before the spike guard judges", group=RUN)
    # The model's settings, less those the data and the run's length give (None until
    # then). Given as a mapping of ModelConfig fields (those the user chose; the others
    # take ModelConfig's defaults), it becomes a ModelConfig in __post_init__.
    model: ModelConfig = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        positive = "epochs steps_per_execution log_every plot_every keep_checkpoints mix_every"
        non_negative = "warmup_steps eval_every ckpt_every ckpt_min_seconds arch_freeze_steps"
        least = dict.fromkeys(f"{positive} max_steps".split(), 1)
        least |= dict.fromkeys(f"{non_negative} clipvalue max_lr drop_attention".split(), 0)
        for name, bound in least.items():
            value = getattr(self, name)
            if value is not None and value < bound:  # max_steps None: no limit
                raise ConfigError(f"--{name} must be >= {bound}, got {value}.")
        if self.arch_freeze_fraction is not None and not 0.0 <= self.arch_freeze_fraction < 1.0:
            raise ConfigError(
                f"--arch_freeze_fraction must be in [0, 1), got {self.arch_freeze_fraction}."
            )
        # search, spike_guard, objective and distribution_strategy
        wrong = unknown_choice(self)
        if wrong is not None:
            name, value, choices = wrong
            raise ConfigError(f"unknown --{name} {value!r}; valid: {', '.join(choices)}.")
        if not self.spike_factor > 0 or self.spike_warmup < 0:
            raise ConfigError(
                f"--spike_factor must be > 0 and --spike_warmup >= 0, got {self.spike_factor} "
                f"and {self.spike_warmup}."
            )
        if self.drop_attention and not self.init_from:
            raise ConfigError(
                "--drop_attention drops blocks of a trained model; give it with --init_from=RUN."
            )
        # Not a `choices` setting: the mechanisms are the registry's, not literals.
        mechanisms = ("identity", *attention_names())
        if self.drop_attention_to not in mechanisms:
            raise ConfigError(
                f"unknown --drop_attention_to {self.drop_attention_to!r}; valid: "
                f"{', '.join(mechanisms)}."
            )
        if self.drop_attention_to != "identity" and not self.drop_attention:
            raise ConfigError(
                "--drop_attention_to says what the blocks --drop_attention chooses become; "
                "give it with --drop_attention=N."
            )
        if self.lr_schedule not in SCHEDULES:
            raise ConfigError(
                f"unknown --lr_schedule {self.lr_schedule!r}; valid: {', '.join(SCHEDULES)}."
            )
        if self.lr_schedule == "inverse_sqrt" and self.warmup_steps == 0:
            raise ConfigError("--lr_schedule inverse_sqrt needs --warmup_steps > 0.")
        if self.objective == "mlm" and self.distribution_strategy != "default":
            raise ConfigError(
                "--objective=mlm trains on one device only so far; drop "
                f"--distribution_strategy={self.distribution_strategy}."
            )
        if self.objective == "mlm" and (self.mix_directory or self.recall_directory):
            raise ConfigError(
                "--mix_directory and --recall_directory are next-token recall tasks; drop "
                "them or use --objective=causal."
            )
        if self.opt_name.lower() not in OPTIMIZERS:
            raise ConfigError(
                f"unknown --opt_name {self.opt_name!r}; valid: {', '.join(OPTIMIZERS)}."
            )
        if not self.model_name or "/" in self.model_name or self.model_name in (".", ".."):
            raise ConfigError(
                f"--model_name {self.model_name!r} must be a non-empty name without '/'."
            )
        # Last, so that a bad training setting is named before a bad model one.
        model = resolve_model(self.model, objective=self.objective, search=self.search)
        object.__setattr__(self, "model", model)

    def arch_settings(self, total_steps: int) -> Any:
        """The architecture logits' `partf.training.optimizer.ArchSettings` for a run of
        `total_steps` updates: the `search` preset's values, each replaced by one given."""
        from partf.training.optimizer import ArchSettings

        preset = SEARCH_PRESETS[self.search]
        given = {"arch_lr": self.arch_lr, "arch_weight_decay": self.arch_weight_decay}
        lr, decay = (preset.get(name) if value is None else value for name, value in given.items())
        fraction = self.arch_freeze_fraction
        if fraction is None and not self.arch_freeze_steps:
            fraction = preset.get("arch_freeze_fraction")
        freeze = self.arch_freeze_steps if fraction is None else round(fraction * total_steps)
        return ArchSettings(lr, decay, int(freeze))

    def schedule_and_optimizer(self, total_steps: int) -> tuple[Any, Any]:
        """The learning-rate schedule and the optimizer these settings describe, for a
        run of `total_steps` updates (what `partf-train` compiles its model with)."""
        from partf.training.lr_schedules import build_schedule
        from partf.training.optimizer import build_optimizer

        schedule = build_schedule(self.lr_schedule, self.max_lr, self.warmup_steps, total_steps)
        optimizer = build_optimizer(
            self.opt_name,
            schedule,
            clipvalue=self.clipvalue,
            weight_decay=self.weight_decay,
            arch=self.arch_settings(total_steps),
        )
        return schedule, optimizer

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe copy; "model" holds the ModelConfig's `to_dict` (its data fields
        None)."""
        return {**self.training_dict(), "model": self.model.to_dict()}

    def training_dict(self) -> dict[str, Any]:
        """The training settings alone, JSON-safe: what a run's files store beside its
        resolved model config (which the draft in `model` would only repeat)."""
        fields = dataclasses.fields(self)
        return {field.name: getattr(self, field.name) for field in fields if field.name != "model"}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Inverse of `to_dict` ("model" may also hold only some of the model's fields, as
        for `TrainConfig(model=...)`); unknown keys are an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown training settings: {', '.join(unknown)}.")
        return cls(**values)


def check_saved_config(saved: Mapping[str, Any], what: str) -> None:
    """Refuses the configuration a run's file stores ({"model": ..., "training": ...})
    when it lacks a setting, rather than letting the setting take today's default
    (FormatError, `partf.serialization.check_complete`)."""
    check_complete(saved["model"], ModelConfig, f"{what} (model settings)")
    # The model's are stored beside them.
    training = {"model": None, **saved["training"]}
    check_complete(training, TrainConfig, f"{what} (training settings)")
