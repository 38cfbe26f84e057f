"""Training a PAR Transformer-XL from records to results: `train(TrainConfig)`.

One run, step by step:

1. Read the training, validation and test records (`partf.data.load_tfrecords`): the
   batch size, sequence length and vocabulary size come from them.
2. Build the model (`ModelConfig` = the user's fields + those), the learning-rate
   schedule and the optimizer; `compile(jit_compile=..., steps_per_execution=...)`.
3. Resume from the newest checkpoint of `checkpoints/<model_name>/` if there is one with
   the same configuration: weights, memory, optimizer, random generators, the running
   loss, and the position in the data stream (the consumed batches of the current epoch
   are skipped).
4. `fit` with the callbacks of `partf.training.callbacks`: memory reset at each epoch
   start, TensorBoard and `training.log` every `log_every` steps, validation,
   checkpoints, pi heatmaps; a NaN loss stops the run, SIGINT/SIGTERM checkpoint and stop.
5. Score the validation and test splits (each with its own memory, starting empty), write
   `results.json`, the animated GIF of pi, and the model as `.keras`.

Output layout, under `output_dir`:

    logs/<model_name>/train/        TensorBoard: loss, perplexity, lr, tau, tokens_per_second,
                                    pi/block_<i>/<candidate>, pi heatmap images
    logs/<model_name>/valid/        TensorBoard: loss, perplexity, perplexity_original, ...
    logs/<model_name>/training.log  configuration, model summary, progress
    checkpoints/<model_name>/       config.json, ckpt-<step>.npz (newest 5), results.json,
                                    <model_name>.keras (the final model)
    plots/<model_name>/             step<N>.png heatmaps, pi.gif

Example:
    >>> results = train(TrainConfig(train_directory="data/train", model_name="base"))
    >>> results["test"]["perplexity"]
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import math
import os
import shutil
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from partf.data.errors import DataError
from partf.training.callbacks import (
    Checkpointer,
    MemoryReset,
    MetricsLogger,
    PiPlotter,
    ProgressTracker,
    RunProgress,
    Segment,
    SpikeMonitor,
    ValidationCallback,
)
from partf.training.checkpoint import (
    CheckpointError,
    CheckpointManager,
    atomic_write_text,
    restore_variables,
)
from partf.training.config import RESUMABLE_CHANGES, ConfigError, TrainConfig
from partf.training.distribution import (
    adapt_model,
    build_strategy,
    checkpoint_view,
    distribute_rows,
    make_evaluator,
    per_replica_batch,
)
from partf.training.perplexity import perplexity_report
from partf.training.plots import make_gif, save_pi_heatmap
from partf.training.spike_guard import SpikeGuard

logger = logging.getLogger("partf.training")


class TrainingError(RuntimeError):
    """The run failed while training (e.g. the loss became NaN); exit status 1."""


class TrainingInterrupted(RuntimeError):
    """SIGINT or SIGTERM stopped the run after a checkpoint.

    Attributes:
        signum: the signal's number (the command line exits with 128 + signum).
    """

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """Where one run writes (see the module docstring)."""

    root: Path
    model_name: str

    @property
    def logs(self) -> Path:
        return self.root / "logs" / self.model_name

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints" / self.model_name

    @property
    def plots(self) -> Path:
        return self.root / "plots" / self.model_name

    @property
    def results(self) -> Path:
        return self.checkpoints / "results.json"

    @property
    def model_file(self) -> Path:
        return self.checkpoints / f"{self.model_name}.keras"

    @property
    def training_log(self) -> Path:
        return self.logs / "training.log"


@dataclasses.dataclass
class Split:
    """One split's dataset and what is known about it."""

    dataset: tf.data.Dataset
    num_batches: int
    batch_size: int
    seq_len: int
    vocab_size: int | None
    text_counts: dict[str, int | None]


# ---------------------------------------------------------------------- data
def load_split(directory: str, what: str, sp_model_prefix: str | None = None) -> Split:
    """Reads a folder of records as a dataset of (inputs, targets) int32 [B, L].

    Args:
        directory: records written by partf-build-data or by the original project.
        what: "train", "valid" or "test", for messages.
        sp_model_prefix: the tokenizer; when its file exists it is checked against the
            records' metadata.

    Returns:
        A `Split` whose dataset has a known length (so the progress bar has an ETA).
    """
    from partf.data import load_tfrecords, model_path, read_metadata, verify_records

    path = Path(directory)
    if not path.exists():
        raise ConfigError(
            f"{what} records {path} do not exist; build them with ./create_tfrecords.sh "
            f"or point --{what}_directory at a folder of .tfrecords files."
        )
    metadata = read_metadata(path)
    sp_model = None
    if sp_model_prefix and metadata.tokenizer_sha256:
        # partf records name their tokenizer: check it against the one given, if present
        # (the records carry the vocabulary size, so the tokenizer itself is optional).
        sp_model = model_path(sp_model_prefix)
        if not sp_model.is_file():
            logger.warning(
                "tokenizer %s not found: not checked against the %s records", sp_model, what
            )
            sp_model = None
    dataset = load_tfrecords(path, sp_model, prefetch=False)
    if not metadata.num_batches:
        raise DataError(f"{what} records {path} hold no batches; rebuild them.")
    # A truncated or corrupt shard is found now, not when training reaches it.
    verify_records(path)
    text_counts: dict[str, int | None] = {}
    if metadata.num_words is not None and metadata.num_lines is not None:
        text_counts["num_words"] = metadata.num_words + metadata.num_lines
    if metadata.num_chars is not None:
        text_counts["num_chars"] = metadata.num_chars
    if metadata.num_tokens:
        text_counts["text_tokens"] = metadata.num_tokens - 1  # every (t, t+1) pair
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(metadata.num_batches))
    return Split(
        dataset,
        int(metadata.num_batches),
        int(metadata.batch_size),
        int(metadata.seq_len),
        metadata.vocab_size,
        text_counts,
    )


def vocab_size_of(splits: Sequence[Split], sp_model_prefix: str) -> int:
    """The vocabulary size from the records' metadata, else from the tokenizer."""
    from partf.data import model_path
    from partf.data import vocab_size_of as tokenizer_size

    for split in splits:
        if split.vocab_size:
            return int(split.vocab_size)
    model_file = model_path(sp_model_prefix)
    if not model_file.is_file():
        raise ConfigError(
            f"cannot tell the vocabulary size: the records have no metadata.json and the "
            f"tokenizer {model_file} does not exist; pass --sp_model_prefix."
        )
    return int(tokenizer_size(model_file))


def plan_segments(start_step: int, batches_per_epoch: int, total_steps: int) -> list[Segment]:
    """Splits the rest of a run into `fit` calls with whole epochs where possible.

    A run resumed in the middle of an epoch first finishes that epoch (skipping the
    batches already consumed); a run cut by max_steps ends with a partial epoch.

    Args:
        start_step: updates already done.
        batches_per_epoch: B.
        total_steps: updates the run makes in all.

    Returns:
        Segments covering steps [start_step, total_steps) in order.
    """
    segments = []
    step = start_step
    while step < total_steps:
        epoch, skip = divmod(step, batches_per_epoch)
        limit = min(batches_per_epoch, total_steps - epoch * batches_per_epoch)
        if skip == 0 and limit == batches_per_epoch:
            full_epochs = (total_steps - step) // batches_per_epoch
            segments.append(Segment(epoch, epoch + full_epochs, 0, batches_per_epoch))
            step += full_epochs * batches_per_epoch
        else:
            segments.append(Segment(epoch, epoch + 1, skip, limit))
            step = epoch * batches_per_epoch + limit
    return segments


# ------------------------------------------------------------------- logging
@contextlib.contextmanager
def _log_to_file(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    root = logging.getLogger("partf")
    root.addHandler(handler)
    previous = root.level
    if root.level == logging.NOTSET or root.level > logging.INFO:
        root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        handler.close()


@contextlib.contextmanager
def _stop_on_signals(progress: RunProgress) -> Iterator[None]:
    """SIGINT/SIGTERM ask the callbacks to checkpoint and stop; a second SIGINT aborts."""

    def request_stop(signum: int, frame: Any) -> None:
        if progress.interrupt is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        progress.interrupt = signum
        logger.warning(
            "%s received: saving a checkpoint and stopping after the current steps.",
            signal.Signals(signum).name,
        )

    previous = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, request_stop)
    except ValueError:  # not the main thread: leave signals alone
        previous = {}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _model_summary(model: keras.Model) -> str:
    lines: list[str] = []
    with contextlib.redirect_stdout(io.StringIO()):
        model.summary(print_fn=lambda line, *args, **kwargs: lines.append(line))
    return "\n".join(lines)


# ------------------------------------------------------------------- trainer
def _model_config(config: TrainConfig, vocab_size: int, batch_size: int, total_steps: int):
    from partf.models.config import ModelConfig

    try:
        return ModelConfig(
            vocab_size=vocab_size,
            batch_size=batch_size,
            tau_steps=total_steps,
            **config.model,
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e).rstrip(".") + ".") from None


def _config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    differences = []
    for key in sorted(set(saved["model"]) | set(current["model"])):
        if saved["model"].get(key) != current["model"].get(key):
            differences.append(
                f"{key}: {saved['model'].get(key)!r} -> {current['model'].get(key)!r}"
            )
    # A setting added to TrainConfig after the checkpoint was written counts as its default.
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for key in sorted(set(saved["training"]) | set(current["training"])):
        if key in RESUMABLE_CHANGES or key == "model":
            continue
        before = saved["training"].get(key, defaults.get(key))
        if before != current["training"].get(key):
            differences.append(f"{key}: {before!r} -> {current['training'].get(key)!r}")
    return differences


class Trainer:
    """Builds everything for one run and trains it; see the module docstring.

    Args:
        config: the run's `TrainConfig`.
        callbacks: extra Keras callbacks, run after partf's own.
    """

    def __init__(self, config: TrainConfig, callbacks: Sequence[keras.callbacks.Callback] = ()):
        self.config = config
        self.extra_callbacks = list(callbacks)
        self.paths = RunPaths(Path(config.output_dir), config.model_name)

    # ------------------------------------------------------------ building
    def _prepare_output(self) -> None:
        try:
            for folder in (self.paths.logs, self.paths.checkpoints, self.paths.plots):
                if self.config.overwrite and folder.exists():
                    shutil.rmtree(folder)
                folder.mkdir(parents=True, exist_ok=True)
            probe = self.paths.checkpoints / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise ConfigError(
                f"cannot write under --output_dir {self.config.output_dir!r} ({e.strerror}); "
                "choose a writable folder."
            ) from None

    def _load_data(self) -> None:
        c = self.config
        sp = c.sp_model_prefix
        self.train_split = load_split(c.train_directory, "train", sp)
        self.valid_split = load_split(c.valid_directory, "valid", sp) if c.valid_directory else None
        self.test_split = load_split(c.test_directory, "test", sp) if c.test_directory else None
        shape = (self.train_split.batch_size, self.train_split.seq_len)
        for split, what in ((self.valid_split, "valid"), (self.test_split, "test")):
            if split is not None and (split.batch_size, split.seq_len) != shape:
                raise ConfigError(
                    f"{what} records have batches of {split.batch_size}x{split.seq_len} but the "
                    f"training records {shape[0]}x{shape[1]}; build all splits with the same "
                    "--batch_size and --seq_len."
                )
        splits = [s for s in (self.train_split, self.valid_split, self.test_split) if s]
        self.vocab_size = vocab_size_of(splits, c.sp_model_prefix)
        self.batches_per_epoch = self.train_split.num_batches
        self.total_steps = c.epochs * self.batches_per_epoch
        if c.max_steps is not None:
            self.total_steps = min(self.total_steps, c.max_steps)
        if c.lr_schedule != "constant" and c.warmup_steps >= self.total_steps:
            logger.warning(
                "the warm-up (%d steps) is not shorter than the run (%d steps): the learning "
                "rate never reaches --max_lr; lower --warmup_steps for short runs.",
                c.warmup_steps,
                self.total_steps,
            )

    def _build(self) -> None:
        c = self.config
        keras.utils.set_random_seed(c.seed)
        if c.mixed_precision:
            policy = "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"
            keras.mixed_precision.set_global_policy(policy)
        else:
            keras.mixed_precision.set_global_policy("float32")
        # Under a strategy the model's batch_size (its memory rows) is one replica's share.
        rows = self.train_split.batch_size
        if self.strategy is not None:
            rows = per_replica_batch(self.strategy, rows)
        self.model_config = _model_config(c, self.vocab_size, rows, self.total_steps)
        with self.strategy.scope() if self.strategy else contextlib.nullcontext():
            self._build_model()
        self.full_config = {"model": self.model_config.to_dict(), "training": c.to_dict()}

    def _build_model(self) -> None:
        from partf.models.par_transformer_xl import PARTransformerXL

        c = self.config
        try:
            self.model = PARTransformerXL(self.model_config, name="par_transformer_xl")
        except ValueError as e:  # e.g. a non-causal attention (lara) in this causal model
            raise ConfigError(str(e).rstrip(".") + ".") from None
        self.schedule, optimizer = c.schedule_and_optimizer(self.total_steps)
        steps_per_execution = c.steps_per_execution
        if self.strategy is not None and steps_per_execution > 1:
            # Keras 3.15's multi-step loop fails on distributed iterators ("You must feed a
            # value for placeholder tensor"): one step per call under a strategy.
            logger.warning(
                "--steps_per_execution %d is not supported under a distribution strategy "
                "by Keras %s; using 1.",
                steps_per_execution,
                keras.__version__,
            )
            steps_per_execution = 1
        self.model.compile(
            optimizer=optimizer,
            jit_compile=c.jit_compile,
            steps_per_execution=steps_per_execution,
        )
        # Create the optimizer's and the loss tracker's variables now, so a checkpoint
        # can be restored into them before the first step.
        self.model.optimizer.build(self.model.trainable_variables)
        if self.strategy is not None:
            adapt_model(self.model, self.strategy)
        self.guard = None
        if c.spike_guard != "off":
            if self.strategy is not None:
                raise ConfigError(
                    "--spike_guard does not work under a distribution strategy yet; use "
                    "--spike_guard=off there."
                )
            self.guard = SpikeGuard(c.spike_guard, c.spike_factor, c.spike_warmup)
            self.guard.install(self.model)

    def _state_groups(self) -> dict[str, list[Any]]:
        groups = {
            # Per-replica memory is saved as all local replicas' rows, in order.
            "model": checkpoint_view(list(self.model.variables)),
            "optimizer": list(self.model.optimizer.variables),
            "metrics": list(self.model.metrics_variables),
        }
        if self.guard is not None:
            groups["guard"] = self.guard.variables
        return groups

    def save_checkpoint(self, step: int) -> str:
        """Writes a checkpoint of the current state at `step` (see `checkpoint.py`)."""
        meta = {
            "config": self.full_config,
            "train_loss": self.progress.last_loss,
            "elapsed_seconds": self._elapsed(),
            "architecture": self.model.architecture_string(),
        }
        return str(self.manager.save(step, self._state_groups(), meta))

    _elapsed_before = 0.0  # seconds spent before a resume
    guard: SpikeGuard | None = None  # the loss-spike guard, when --spike_guard is not off

    def _elapsed(self) -> float:
        return self._elapsed_before + (time.perf_counter() - self._started)

    def _restore(self) -> int:
        """Restores the newest checkpoint; returns the step to start from."""
        manager = CheckpointManager(self.paths.checkpoints, keep=self.config.keep_checkpoints)
        latest = manager.load_latest()
        if latest is None:
            if manager.checkpoints():
                raise CheckpointError(
                    f"no checkpoint in {self.paths.checkpoints} can be read; move the folder "
                    "away or pass --overwrite to start again."
                )
            return 0
        groups, meta, path = latest
        differences = _config_differences(meta["config"], self.full_config)
        if differences:
            raise ConfigError(
                f"{self.paths.checkpoints} holds a run with another configuration "
                f"({'; '.join(differences[:3])}); pass --overwrite to start again or choose "
                "another --model_name."
            )
        live = self._state_groups()
        for name in live:
            restore_variables(live[name], groups.get(name, []), name)
        step = int(meta["step"])
        self.progress.last_checkpoint = str(path)
        self._elapsed_before = float(meta.get("elapsed_seconds", 0.0))
        self.progress.last_loss = meta.get("train_loss")
        if step % self.batches_per_epoch:
            # Mid-epoch: fit() will zero the running loss; hand back its saved sums.
            self.progress.restore_metrics = list(
                zip(self.model.metrics_variables, groups["metrics"], strict=True)
            )
        logger.info("resumed from %s at step %d", path, step)
        return step

    def _callbacks(self, train_writer: Any, valid_writer: Any) -> list[keras.callbacks.Callback]:
        c = self.config
        callbacks: list[keras.callbacks.Callback] = [
            ProgressTracker(self.progress),
            MemoryReset(self.progress),
            MetricsLogger(self.progress, train_writer, self.schedule.value_at, c.log_every),
            PiPlotter(self.progress, train_writer, self.paths.plots, c.plot_every),
        ]
        if self.valid_split is not None:
            callbacks.append(
                ValidationCallback(
                    self.progress,
                    valid_writer,
                    self.evaluator,
                    self.valid_split.dataset,
                    c.eval_every,
                    self.valid_split.text_counts,
                )
            )
        if self.guard is not None:
            callbacks.insert(1, SpikeMonitor(self.progress, train_writer, self.guard, c.log_every))
        callbacks.append(Checkpointer(self.progress, self.save_checkpoint, c.ckpt_every))
        return callbacks + self.extra_callbacks

    def _worker_paths(self) -> None:
        """Under multi_worker, workers other than the chief write under worker_<i>/."""
        resolver = getattr(self.strategy, "cluster_resolver", None)
        task_type = getattr(resolver, "task_type", None)
        if not task_type:
            return
        task_id = resolver.task_id or 0
        has_chief = "chief" in resolver.cluster_spec().as_dict()
        if task_type == "chief" or (task_type == "worker" and task_id == 0 and not has_chief):
            return
        self.paths = RunPaths(
            Path(self.config.output_dir) / f"{task_type}_{task_id}", self.config.model_name
        )

    # ------------------------------------------------------------- running
    def run(self) -> dict[str, Any]:
        """Trains (or resumes) to the end and returns the results written to results.json.

        Raises:
            ConfigError: bad settings or inputs (the command line exits with 2).
            TrainingError: the loss became NaN or Inf (exit 1); the last good checkpoint stays.
            TrainingInterrupted: SIGINT/SIGTERM; a checkpoint was written first.
        """
        self._started = time.perf_counter()
        # Multi-worker and TPU strategies must exist before TensorFlow starts its runtime.
        self.strategy = build_strategy(self.config.distribution_strategy)
        self._worker_paths()
        # Everything that can reject the inputs runs before anything is written.
        self._load_data()
        self._build()
        tokens_per_batch = self.train_split.batch_size * self.train_split.seq_len
        self.progress = RunProgress(self.batches_per_epoch, self.total_steps, tokens_per_batch)
        start_step = 0 if self.config.overwrite else self._restore()
        self._prepare_output()
        self.manager = CheckpointManager(self.paths.checkpoints, keep=self.config.keep_checkpoints)
        with _log_to_file(self.paths.training_log):
            return self._run(start_step)

    def _run(self, start_step: int) -> dict[str, Any]:
        c = self.config
        self.progress.epoch, self.progress.step_in_epoch = divmod(
            start_step, self.batches_per_epoch
        )
        atomic_write_text(
            self.paths.checkpoints / "config.json", json.dumps(self.full_config, indent=2) + "\n"
        )
        logger.info("configuration:\n%s", json.dumps(self.full_config, indent=2))
        logger.info("model summary:\n%s", _model_summary(self.model))
        logger.info(
            "%d batches of %dx%d per epoch, %d steps in all, starting at step %d",
            self.batches_per_epoch,
            self.train_split.batch_size,
            self.train_split.seq_len,
            self.total_steps,
            start_step,
        )
        self.evaluator = make_evaluator(
            self.model, self.strategy, self.train_split.batch_size, c.jit_compile
        )
        train_data = self.train_split.dataset.cache()
        train_writer = tf.summary.create_file_writer(str(self.paths.logs / "train"))
        valid_writer = tf.summary.create_file_writer(str(self.paths.logs / "valid"))
        callbacks = self._callbacks(train_writer, valid_writer)
        history: dict[str, list[float]] = {}
        try:
            with _stop_on_signals(self.progress):
                for segment in plan_segments(start_step, self.batches_per_epoch, self.total_steps):
                    self.progress.segment = segment
                    self.progress.epoch, self.progress.step_in_epoch = (
                        segment.initial_epoch,
                        segment.skip,
                    )
                    data = train_data.skip(segment.skip).take(segment.limit - segment.skip)
                    data = data.prefetch(tf.data.AUTOTUNE)
                    data = distribute_rows(self.strategy, data, self.train_split.batch_size)
                    fit = self.model.fit(
                        data,
                        initial_epoch=segment.initial_epoch,
                        epochs=segment.epochs,
                        callbacks=callbacks,
                        shuffle=False,
                        verbose=1 if os.isatty(1) else 2,
                    )
                    for key, values in fit.history.items():
                        history.setdefault(key, []).extend(values)
                    if self.model.stop_training:
                        break
        finally:
            train_writer.flush()
            valid_writer.flush()
        if self.progress.spike_stop is not None:
            raise TrainingError(
                f"the training loss spiked (above {c.spike_factor:g} x its running mean, or "
                f"NaN) at step {self.progress.spike_stop}; stopped without applying it, the "
                f"last checkpoint is {self.progress.last_checkpoint}. Lower --max_lr, set "
                "--clipvalue, or use --spike_guard=skip."
            )
        if self.progress.non_finite:
            raise TrainingError(
                f"the training loss became NaN or Inf near step {self.progress.global_step}; "
                f"the last good checkpoint is {self.progress.last_checkpoint}. Lower --max_lr "
                "or set --clipvalue."
            )
        if self.progress.interrupt is not None:
            raise TrainingInterrupted(
                f"stopped by {signal.Signals(self.progress.interrupt).name} at step "
                f"{self.progress.global_step}; checkpoint {self.progress.last_checkpoint}. "
                "Run the same command again to resume.",
                self.progress.interrupt,
            )
        return self._finish(history, valid_writer)

    def _finish(self, history: dict[str, list[float]], valid_writer: Any) -> dict[str, Any]:
        step = self.progress.global_step
        pi = np.asarray(self.model.pi())
        save_pi_heatmap(
            pi,
            self.model.candidate_names,
            self.paths.plots / f"step{step}.png",
            f"Iteration {step}",
        )
        frames = make_gif(self.paths.plots, self.paths.plots / "pi.gif")
        logger.info("pi animation: %s (%d frames)", self.paths.plots / "pi.gif", frames)
        splits = {"valid": self.valid_split, "test": self.test_split}
        scores = {}
        for name, split in splits.items():
            if split is None:
                continue
            if name == "valid" and self.progress.valid_report_step == step:
                report = self.progress.valid_report  # scored at this very step already
            else:
                stats = self.evaluator.evaluate(split.dataset)
                report = perplexity_report(stats, **split.text_counts)
            scores[name] = report
            logger.info(
                "%s: loss %.4f, perplexity %.2f, original's figure %.2f, word perplexity %s, "
                "bits per character %s",
                name,
                report["loss"],
                report["perplexity"],
                report["perplexity_original"],
                _fmt(report["word_perplexity"]),
                _fmt(report["bits_per_character"]),
            )
        if "valid" in scores:
            with valid_writer.as_default(step=step):
                tf.summary.scalar("final_perplexity", scores["valid"]["perplexity"])
            valid_writer.flush()
        train_loss = history["loss"][-1] if history.get("loss") else self.progress.last_loss
        results = {
            "model_name": self.config.model_name,
            "steps": step,
            "epochs": self.config.epochs,
            "wall_time_seconds": self._elapsed(),
            "train": {
                "loss": train_loss,
                "perplexity": math.exp(train_loss) if train_loss is not None else None,
            },
            "valid": scores.get("valid"),
            "test": scores.get("test"),
            "tau": float(keras.ops.convert_to_numpy(self.model.tau())),
            "pi": pi.tolist(),
            "candidates": list(self.model.candidate_names),
            "architecture": self.model.architecture_string(),
            "config": self.full_config,
        }
        self._save_model()
        atomic_write_text(self.paths.results, json.dumps(results, indent=2) + "\n")
        logger.info(
            "done: %d steps in %.0fs; architecture %s; results in %s",
            step,
            results["wall_time_seconds"],
            results["architecture"],
            self.paths.results,
        )
        return results

    def _save_model(self) -> None:
        """Saves the model as .keras (atomically: written aside, then renamed)."""
        final = self.paths.model_file
        tmp = final.with_name(f".tmp-{os.getpid()}-{final.name}")
        try:
            self.model.save(tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, final)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        logger.info("model saved to %s", final)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def train(config: TrainConfig, callbacks: Sequence[keras.callbacks.Callback] = ()) -> dict:
    """Runs (or resumes) one training run; see `Trainer`.

    Args:
        config: the run's settings.
        callbacks: extra Keras callbacks.

    Returns:
        The results also written to checkpoints/<model_name>/results.json.
    """
    return Trainer(config, callbacks).run()
