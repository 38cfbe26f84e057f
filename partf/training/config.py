"""The training configuration: one frozen dataclass of plain values.

The model's own settings live in `partf.models.config.ModelConfig`; `TrainConfig.model`
holds the fields of it that the user chose. The rest come from the data (vocabulary
size, batch size) and the run (`tau_steps`, the run's length), and the trainer fills
them in. Both configurations go into `config.json`, every checkpoint, and `results.json`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from partf.data.errors import UsageError
from partf.training.lr_schedules import SCHEDULES
from partf.training.optimizer import OPTIMIZERS

#: Values of `TrainConfig.distribution_strategy` (see partf.training.distribution).
DISTRIBUTION_STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")

#: ModelConfig fields the trainer sets itself, from the data and the run's length.
DERIVED_MODEL_FIELDS = ("vocab_size", "batch_size", "tau_steps")

#: Training fields that do not change the numbers a run computes: a run may resume
#: with different values of these.
RESUMABLE_CHANGES = (
    "train_directory",
    "valid_directory",
    "test_directory",
    "sp_model_prefix",
    "output_dir",
    "log_every",
    "eval_every",
    "ckpt_every",
    "plot_every",
    "keep_checkpoints",
    "steps_per_execution",
    "jit_compile",
    "overwrite",
)


class ConfigError(UsageError):
    """A bad setting or combination of settings; the command line exits with status 2."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything about a run except the model's architecture.

    Paths are strings so the configuration stays JSON-safe.
    """

    # Data
    train_directory: str = "data/wikitext2_bsz32_seqlen32_tfrecords_train"  # training records
    valid_directory: str = "data/wikitext2_bsz32_seqlen32_tfrecords_valid"  # "" skips validation
    test_directory: str = "data/wikitext2_bsz32_seqlen32_tfrecords_test"  # "" skips the test
    sp_model_prefix: str = "data/tokenizer/wiki2_12k"  # tokenizer, for the vocabulary size
    # Where results go: <output_dir>/{logs,checkpoints,plots}/<model_name>
    model_name: str = "partf"  # run name (the command line defaults to the current time)
    output_dir: str = "."  # root of logs/, checkpoints/ and plots/
    # Length of the run
    epochs: int = 20  # passes over the training records
    max_steps: int | None = None  # stop after this many updates (None: all epochs)
    # Optimization
    max_lr: float = 1e-4  # peak learning rate
    warmup_steps: int = 4000  # linear warm-up length
    lr_schedule: str = "cosine"  # cosine (to zero at the end), inverse_sqrt or constant
    opt_name: str = "adam"  # a Keras optimizer name
    clipvalue: float = 0.0  # clip gradient elements to +-clipvalue (0: no clipping)
    weight_decay: float | None = None  # decoupled weight decay (None: optimizer default)
    arch_lr: float | None = None  # own rate for the architecture logits (None: shared)
    arch_weight_decay: float | None = None  # own weight decay for them (None: shared)
    arch_freeze_steps: int = 0  # updates before the architecture logits start learning
    # Execution
    steps_per_execution: int = 32  # training steps per compiled call
    jit_compile: bool = True  # compile the train step with XLA
    mixed_precision: bool = False  # float16 (GPU) or bfloat16 (CPU) compute
    seed: int = 0  # seeds weights, dropout and Gumbel noise
    distribution_strategy: str = "default"  # default, mirrored, multi_worker or tpu
    # Monitoring and checkpoints
    log_every: int = 100  # steps between logged losses and TensorBoard scalars
    eval_every: int = 0  # steps between validations (0: at each epoch end only)
    ckpt_every: int = 0  # steps between checkpoints (0: at each epoch end only)
    plot_every: int = 1000  # steps between pi heatmaps
    keep_checkpoints: int = 5  # newest checkpoints kept
    overwrite: bool = False  # discard this model_name's checkpoints instead of resuming
    # Loss-spike guard (partf.training.spike_guard): off, skip or stop
    spike_guard: str = "off"  # what to do with a step whose loss is a spike
    spike_factor: float = 2.0  # a spike: loss > spike_factor x running mean (or NaN/Inf)
    spike_warmup: int = 100  # accepted steps before losses are judged
    # The model's settings chosen by the user (ModelConfig field -> value)
    model: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        positive = {
            "epochs": self.epochs,
            "steps_per_execution": self.steps_per_execution,
            "log_every": self.log_every,
            "plot_every": self.plot_every,
            "keep_checkpoints": self.keep_checkpoints,
        }
        for name, value in positive.items():
            if value < 1:
                raise ConfigError(f"--{name} must be >= 1, got {value}.")
        non_negative = {
            "warmup_steps": self.warmup_steps,
            "eval_every": self.eval_every,
            "ckpt_every": self.ckpt_every,
            "arch_freeze_steps": self.arch_freeze_steps,
            "clipvalue": self.clipvalue,
            "max_lr": self.max_lr,
        }
        for name, value in non_negative.items():
            if value < 0:
                raise ConfigError(f"--{name} must be >= 0, got {value}.")
        if self.spike_guard not in ("off", "skip", "stop"):
            raise ConfigError(
                f"unknown --spike_guard {self.spike_guard!r}; valid: off, skip, stop."
            )
        if not self.spike_factor > 0 or self.spike_warmup < 0:
            raise ConfigError(
                f"--spike_factor must be > 0 and --spike_warmup >= 0, got {self.spike_factor} "
                f"and {self.spike_warmup}."
            )
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"--max_steps must be >= 1, got {self.max_steps}.")
        if self.lr_schedule not in SCHEDULES:
            raise ConfigError(
                f"unknown --lr_schedule {self.lr_schedule!r}; valid: {', '.join(SCHEDULES)}."
            )
        if self.lr_schedule == "inverse_sqrt" and self.warmup_steps == 0:
            raise ConfigError("--lr_schedule inverse_sqrt needs --warmup_steps > 0.")
        if self.distribution_strategy not in DISTRIBUTION_STRATEGIES:
            raise ConfigError(
                f"unknown --distribution_strategy {self.distribution_strategy!r}; valid: "
                f"{', '.join(DISTRIBUTION_STRATEGIES)}."
            )
        if self.opt_name.lower() not in OPTIMIZERS:
            raise ConfigError(
                f"unknown --opt_name {self.opt_name!r}; valid: {', '.join(OPTIMIZERS)}."
            )
        if not self.model_name or "/" in self.model_name or self.model_name in (".", ".."):
            raise ConfigError(
                f"--model_name {self.model_name!r} must be a non-empty name without '/'."
            )
        for name in DERIVED_MODEL_FIELDS:
            if name in self.model:
                raise ConfigError(
                    f"model field {name!r} comes from the data and the run's length; do not set it."
                )

    def schedule_and_optimizer(self, total_steps: int) -> tuple[Any, Any]:
        """The learning-rate schedule and the optimizer these settings describe, for a
        run of `total_steps` updates (what `partf-train` compiles its model with)."""
        from partf.training.lr_schedules import build_schedule
        from partf.training.optimizer import ArchSettings, build_optimizer

        schedule = build_schedule(self.lr_schedule, self.max_lr, self.warmup_steps, total_steps)
        optimizer = build_optimizer(
            self.opt_name,
            schedule,
            clipvalue=self.clipvalue,
            weight_decay=self.weight_decay,
            arch=ArchSettings(self.arch_lr, self.arch_weight_decay, self.arch_freeze_steps),
        )
        return schedule, optimizer

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe copy."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Inverse of `to_dict`; unknown keys are an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown training settings: {', '.join(unknown)}.")
        return cls(**values)
