"""The model a run trains, and its state on disk: build, restore, save.

- `build_model(config, data, strategy) -> Built`: the compiled model, its schedule and
  loss-spike guard, and the full configuration (the user's fields and those the data
  gives) that checkpoints and results carry.
- `restore(folder, keep, built, batches_per_epoch) -> Resumed`: the newest checkpoint
  loaded into the built model, and where the run picks up.
- `CheckpointWriter`: the `save` the `Checkpointer` callback calls.

A checkpoint holds the groups of `Built.state_groups()`: "model" (every model variable,
per-replica memory as all local replicas' rows), "optimizer", "metrics" (the running
loss's sums) and, with --spike_guard, "guard"; each variable is restored from the array
saved under its path (`checkpoint.restore_variables`), whatever order it was made in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras

from partf.training.callbacks.checkpointer import SavedCheckpoint
from partf.training.callbacks.progress import attach_fit_state
from partf.training.checkpoint import (
    CheckpointError,
    CheckpointManager,
    matched_arrays,
    restore_variables,
    saved_paths,
    saved_root,
)
from partf.training.config import RESUMABLE_CHANGES, ConfigError, TrainConfig
from partf.training.distribution import adapt_model, checkpoint_view, per_replica_batch
from partf.training.spike_guard import SpikeGuard
from partf.training.splits import RunData

if TYPE_CHECKING:
    import tensorflow as tf

logger = logging.getLogger("partf.training")


# --------------------------------------------------------------------- build
@dataclasses.dataclass(frozen=True)
class Built:
    """The compiled model of a run and what came with it.

    Attributes:
        model: the `PARTransformerXL`, compiled, its optimizer built.
        model_config: its `ModelConfig`.
        schedule: the learning-rate schedule (`value_at(step)` for the logs).
        guard: the installed loss-spike guard, or None (--spike_guard=off).
        full_config: {"model": ..., "training": ...}, as config.json, checkpoints and
            results.json carry it.
    """

    model: Any
    model_config: Any
    schedule: Any
    guard: SpikeGuard | None
    full_config: dict[str, Any]

    def state_groups(self) -> dict[str, list[Any]]:
        """The variables a checkpoint holds, by group (restored by path, not order)."""
        groups = {
            # Per-replica memory is saved as all local replicas' rows, in order.
            "model": checkpoint_view(list(self.model.variables)),
            "optimizer": list(self.model.optimizer.variables),
            "metrics": list(self.model.metrics_variables),
        }
        if self.guard is not None:
            groups["guard"] = self.guard.variables
        return groups


def build_model(
    config: TrainConfig, data: RunData, strategy: tf.distribute.Strategy | None
) -> Built:
    """Seeds the random generators, sets the precision policy and builds the model.

    Args:
        config: the run's settings.
        data: the run's records (vocabulary size, batch shape, steps in all).
        strategy: the `tf.distribute` strategy, or None for one device.

    Returns:
        The `Built` model, compiled, with the optimizer's and metrics' variables created
        (so a checkpoint can be restored into them before the first step).

    Raises:
        ConfigError: settings the model refuses, or --spike_guard under a strategy.
    """
    keras.utils.set_random_seed(config.seed)
    if config.mixed_precision:
        policy = "mixed_float16" if _has_gpu() else "mixed_bfloat16"
        keras.mixed_precision.set_global_policy(policy)
    else:
        keras.mixed_precision.set_global_policy("float32")
    # Under a strategy the model's batch_size (its memory rows) is one replica's share.
    rows = data.train.batch_size
    if strategy is not None:
        rows = per_replica_batch(strategy, rows)
    model_config = config.model_config(data.vocab_size, rows, data.total_steps)
    sampled = model_config.is_stochastic and model_config.search_estimator == "sampled"
    if sampled and config.jit_compile and keras.backend.backend() == "tensorflow":
        # TensorFlow's XLA bridge resolves every input of the per-block conditional as a
        # possible compile-time constant by interpreting its graph (XlaCaseOp ->
        # ValueInference); at the base configuration that did not finish in 10 minutes,
        # although small models compile. The JAX backend compiles it (tests/test_jax_backend.py).
        raise ConfigError(
            "--search_estimator=sampled cannot be compiled with XLA by TensorFlow at "
            "useful sizes (its conditionals do not finish compiling); add "
            "--jit_compile=False, or train on the JAX backend (KERAS_BACKEND=jax)."
        )
    with strategy.scope() if strategy else contextlib.nullcontext():
        model, schedule, guard = _compiled_model(config, model_config, data.total_steps, strategy)
    # Learned positions cannot raise inside compiled code: refuse a split whose streams
    # (one epoch, or one evaluation pass, between memory resets) outrun the table now.
    # An encoder's sequences are the rows of one batch.
    for split in (data.train, data.valid, data.test):
        if split is not None:
            try:
                if config.objective == "mlm":
                    model.check_length(split.seq_len)
                else:
                    model.check_positions(split.num_batches * split.seq_len)
            except ValueError as e:
                raise ConfigError(str(e)) from None
    full_config = {"model": model_config.to_dict(), "training": config.to_dict()}
    if model_config.is_stochastic:
        arch = config.arch_settings(data.total_steps)
        logger.info(
            "architecture search (--search=%s, %s estimator): logits at lr %s, weight decay %s, "
            "frozen for %d of %d steps",
            config.search,
            model_config.search_estimator,
            "shared" if arch.lr is None else f"{arch.lr:g}",
            "shared" if arch.weight_decay is None else f"{arch.weight_decay:g}",
            arch.freeze_steps,
            data.total_steps,
        )
    return Built(model, model_config, schedule, guard, full_config)


def _has_gpu() -> bool:
    """Whether the backend computes on a GPU (float16 there, bfloat16 elsewhere)."""
    if keras.backend.backend() == "jax":
        import jax

        return any(device.platform == "gpu" for device in jax.devices())
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def masked_lm(model_config: Any) -> Any:
    """The `MaskedLanguageModel` of `--objective=mlm`, built from the run's `ModelConfig`
    (causal=False: no XL memory, no adaptive softmax; `tie_embeddings` is ignored, the
    MLM head is always tied). A search's architecture logits get the optimizer settings
    of --search and --arch_* as the causal model's do (the optimizer picks them by the
    "arch_logits" path).
    """
    from partf.models.masked_lm import MaskedLanguageModel

    logger.info(
        "objective mlm: a bidirectional encoder; --mem_len and the adaptive softmax "
        "(--cutoffs, --proj_*) do not apply and are ignored"
    )
    return MaskedLanguageModel(config=model_config, name="masked_language_model")


def _compiled_model(
    config: TrainConfig,
    model_config: Any,
    total_steps: int,
    strategy: tf.distribute.Strategy | None,
) -> tuple[Any, Any, SpikeGuard | None]:
    """The model, compiled with its optimizer, and the spike guard (inside the scope)."""
    from partf.models.par_transformer_xl import PARTransformerXL

    try:
        if not model_config.causal:
            model = masked_lm(model_config)
        else:
            model = PARTransformerXL(model_config, name="par_transformer_xl")
    except ValueError as e:  # e.g. a non-causal attention (lara) in this causal model
        raise ConfigError(str(e).rstrip(".") + ".") from None
    schedule, optimizer = config.schedule_and_optimizer(total_steps)
    steps_per_execution = config.steps_per_execution
    if strategy is not None and steps_per_execution > 1:
        # Keras 3.15's multi-step loop fails on distributed iterators ("You must feed a
        # value for placeholder tensor"): one step per call under a strategy.
        logger.warning(
            "--steps_per_execution %d is not supported under a distribution strategy "
            "by Keras %s; using 1.",
            steps_per_execution,
            keras.__version__,
        )
        steps_per_execution = 1
    model.compile(
        optimizer=optimizer,
        jit_compile=config.jit_compile,
        steps_per_execution=steps_per_execution,
    )
    # Create the optimizer's and the loss tracker's variables now, so a checkpoint
    # can be restored into them before the first step.
    model.optimizer.build(model.trainable_variables)
    if strategy is not None:
        adapt_model(model, strategy)
    guard = None
    if config.spike_guard != "off":
        if keras.backend.backend() != "tensorflow":
            raise ConfigError(
                f"--spike_guard={config.spike_guard} needs the TensorFlow backend (its "
                "guarded step is TensorFlow's); use --spike_guard=off on "
                f"{keras.backend.backend()}, or KERAS_BACKEND=tensorflow."
            )
        if strategy is not None:
            raise ConfigError(
                "--spike_guard does not work under a distribution strategy yet; use "
                "--spike_guard=off there."
            )
        guard = SpikeGuard(config.spike_guard, config.spike_factor, config.spike_warmup)
        guard.install(model)
    return model, schedule, guard


# ------------------------------------------------------------------- restore
@dataclasses.dataclass(frozen=True)
class Resumed:
    """Where a run picks up: from scratch (the defaults) or from a checkpoint.

    Attributes:
        step: updates already done.
        checkpoint: the checkpoint restored, or None.
        elapsed_seconds: wall time spent before the resume.
        train_loss: the running training loss the checkpoint recorded.
        metrics: (variable, value) pairs of the running loss's sums, to put back when a
            resumed epoch begins; empty unless the checkpoint is mid-epoch.
    """

    step: int = 0
    checkpoint: SavedCheckpoint | None = None
    elapsed_seconds: float = 0.0
    train_loss: float | None = None
    metrics: tuple[tuple[Any, Any], ...] = ()


def _defaults(config_class: type) -> dict[str, Any]:
    """Each field's default, JSON-safe (tuples as lists, as `to_dict` writes them)."""
    defaults = {}
    for field in dataclasses.fields(config_class):
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            continue
        defaults[field.name] = list(value) if isinstance(value, tuple) else value
    return defaults


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The settings that differ between a checkpoint's configuration and this run's.

    A setting added to `ModelConfig` or `TrainConfig` after the checkpoint was written
    counts as its default, so checkpoints of earlier versions of the same format resume.

    Args:
        saved: the checkpoint's full configuration.
        current: this run's (`Built.full_config`).

    Returns:
        "name: before -> after" lines; settings a run may change on resume are left out.
    """
    from partf.models.config import ModelConfig

    differences = []
    defaults = _defaults(ModelConfig)
    saved_model = saved["model"]
    for key in sorted(set(saved_model) | set(current["model"])):
        before = saved_model.get(key, defaults.get(key))
        if before != current["model"].get(key):
            differences.append(f"{key}: {before!r} -> {current['model'].get(key)!r}")
    if not any(line.startswith("attention_options:") for line in differences):
        # The generation of attention defaults counts through the options it resolves to
        # (one that changed no option of the run's mechanisms resumes), and is named
        # beside them when they differ: the flag to pass.
        differences = [line for line in differences if not line.startswith("attention_defaults:")]
    defaults = _defaults(TrainConfig)
    for key in sorted(set(saved["training"]) | set(current["training"])):
        if key in RESUMABLE_CHANGES or key == "model":
            continue
        before = saved["training"].get(key, defaults.get(key))
        if before != current["training"].get(key):
            differences.append(f"{key}: {before!r} -> {current['training'].get(key)!r}")
    return differences


def restore(folder: Path, keep: int, built: Built, batches_per_epoch: int) -> Resumed:
    """Loads the newest checkpoint in `folder` into the built model, if there is one.

    Args:
        folder: checkpoints/<model_name>/.
        keep: how many checkpoints the folder keeps (--keep_checkpoints).
        built: the run's model; its variables receive the checkpoint's values.
        batches_per_epoch: B, to tell whether the checkpoint is mid-epoch.

    Returns:
        `Resumed()` when the folder holds no checkpoint, else where the run picks up.

    Raises:
        CheckpointError: checkpoints exist but none can be read.
        ConfigError: the checkpoint is of a run with another configuration.
    """
    manager = CheckpointManager(folder, keep=keep)
    latest = manager.load_latest()
    if latest is None:
        if manager.checkpoints():
            raise CheckpointError(
                f"no checkpoint in {folder} can be read; move the folder "
                "away or pass --overwrite to start again."
            )
        return Resumed()
    groups, meta, path = latest
    differences = config_differences(meta["config"], built.full_config)
    if differences:
        raise ConfigError(
            f"{folder} holds a run with another configuration "
            f"({'; '.join(differences[:3])}); pass --overwrite to start again or choose "
            "another --model_name."
        )
    live = built.state_groups()
    # Each variable takes the saved array of its own path (checkpoint.variable_key).
    keys = {"root": built.model.name, "saved_model_root": saved_root(meta)}
    for name in live:
        restore_variables(live[name], groups.get(name, []), name, saved_paths(meta, name), **keys)
    step = int(meta["step"])
    metrics: tuple[tuple[Any, Any], ...] = ()
    if step % batches_per_epoch:
        # Mid-epoch: fit() will zero the running loss; hand back its saved sums.
        variables, paths = built.model.metrics_variables, saved_paths(meta, "metrics")
        metrics = tuple(matched_arrays(variables, groups["metrics"], "metrics", paths, **keys))
    logger.info("resumed from %s at step %d", path, step)
    return Resumed(
        step=step,
        checkpoint=SavedCheckpoint(step, str(path)),
        elapsed_seconds=float(meta.get("elapsed_seconds", 0.0)),
        train_loss=meta.get("train_loss"),
        metrics=metrics,
    )


# ---------------------------------------------------------------------- save
@dataclasses.dataclass(frozen=True)
class Clock:
    """The run's wall time, across resumes.

    Attributes:
        started: `time.perf_counter()` when this process's part of the run began.
        before: seconds spent before a resume.
    """

    started: float
    before: float = 0.0

    def seconds(self) -> float:
        """Seconds the run has taken so far."""
        return self.before + (time.perf_counter() - self.started)


@dataclasses.dataclass(frozen=True)
class CheckpointWriter:
    """Writes a checkpoint of the current state: the `Checkpointer`'s `save`.

    Args:
        manager: the run's `CheckpointManager` (it keeps the newest few).
        built: the run's model; what is saved is `built.state_groups()`.
        clock: the run's wall time, recorded for a resume.
    """

    manager: CheckpointManager
    built: Built
    clock: Clock

    def __call__(self, step: int, train_loss: float | None) -> str:
        """Writes the checkpoint of `step` and returns its path (see `checkpoint.py`)."""
        attach_fit_state(self.built.model)  # JAX: the values fit holds, in the variables
        meta = {
            "config": self.built.full_config,
            "train_loss": train_loss,
            "elapsed_seconds": self.clock.seconds(),
            "architecture": self.built.model.architecture_string(),
            "model_name": self.built.model.name,  # dropped from the keys on restore
        }
        return str(self.manager.save(step, self.built.state_groups(), meta))
