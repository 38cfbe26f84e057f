"""Training a PAR Transformer-XL from records to results: `train(TrainConfig)`.

One run is a pipeline; each stage takes what the previous ones returned (`Trainer.run`
reads top to bottom):

1. `load_data(config) -> RunData` (partf.training.splits): the training, validation and
   test records; the batch size, sequence length and vocabulary size come from them.
2. `resolve_for_run(config, data, rows, ...) -> ModelConfig`
   (partf.training.resolve): the model's config, completed from the draft with the data,
   the blocks --drop_attention chose and the costs --search_cost=time measured (both
   computed just before). `build_model(config, model_config, data, strategy) -> Built`
   (partf.training.build): that model, the learning-rate schedule and the optimizer;
   `compile(jit_compile=..., steps_per_execution=...)`.
3. `restore(...) -> Resumed` (partf.training.checkpoint): the newest checkpoint of
   `checkpoints/<model_name>/`, if there is one with the same configuration, with the
   position in the data stream.
4. `run_fit(...) -> history`: `fit`, one call per `Segment`, with the callbacks of
   `partf.training.callbacks`. A NaN loss or a loss spike stops the run, SIGINT/SIGTERM
   checkpoint and stop; the trainer then asks the callbacks why (`first_stop`) and raises.
5. `finish(...) -> results`: score the validation and test splits (each with its own
   memory, starting empty) and, with --recall_directory, the MQAR split by its answers;
   write `results.json`, the animated GIF of pi, and the model as `.keras`.

The same stages run on the JAX backend without TensorFlow: the splits are numpy batches
(partf.data.record_reader), `fit` takes each segment's batches as rows, the evaluator is
`JaxEvaluator` and the TensorBoard files come from `partf.training.summaries`. There only
`--distribution_strategy default` exists, and the spike guard and `--objective=mlm`
(TensorFlow's step and tf.data masks) are refused in one line.

The output layout under `output_dir` is in docs/training.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras

from partf.atomic import atomic_write_text
from partf.serialization import FORMAT_KEY, FORMAT_VERSION
from partf.training.build import Built, build_model
from partf.training.callbacks.console_progress import ConsoleProgress
from partf.training.callbacks.run_callbacks import make_callbacks
from partf.training.checkpoint import CheckpointManager, CheckpointWriter, Resumed, restore
from partf.training.config import ConfigError, TrainConfig
from partf.training.cost_table import cost_table, needs_table, write_cost_table
from partf.training.distribution import build_strategy, per_replica_batch
from partf.training.drop_selection import Selection, read_selection, select_dropped, write_selection
from partf.training.evaluation.block_weights import expected_evaluator
from partf.training.evaluation.evaluators import make_evaluator
from partf.training.fitting import plan_segments, run_fit
from partf.training.init_from import init_weights
from partf.training.paths import RunPaths, prepare_output, run_paths
from partf.training.resolve import resolve_for_run
from partf.training.results import Trained, finish
from partf.training.run_state import Clock, RunProgress, StopReason
from partf.training.splits import RunData, Split, load_data, load_split, vocab_size_of

__all__ = [
    "RunPaths",
    "Split",
    "Trainer",
    "TrainingError",
    "TrainingInterrupted",
    "load_split",
    "plan_segments",
    "train",
    "vocab_size_of",
]

if TYPE_CHECKING:
    import tensorflow as tf

logger = logging.getLogger("partf.training")


class TrainingError(RuntimeError):
    """The run failed while training (e.g. the loss became NaN); exit status 1."""


class TrainingInterrupted(RuntimeError):
    """SIGINT or SIGTERM stopped the run after a checkpoint; the command line exits with
    128 + `signum`, the signal's number."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


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


def _model_summary(model: keras.Model) -> str:
    lines: list[str] = []
    with contextlib.redirect_stdout(io.StringIO()):
        model.summary(print_fn=lambda line, *args, **kwargs: lines.append(line))
    return "\n".join(lines)


def log_run_start(paths: RunPaths, built: Built, data: RunData, start_step: int) -> None:
    """Writes config.json and puts the configuration and the model in training.log."""
    # config.json says its format, as every file partf reads back does: partf-generate
    # prefers it to the checkpoint's own record.
    record = {FORMAT_KEY: FORMAT_VERSION, **built.full_config}
    atomic_write_text(paths.folder.config_path, json.dumps(record, indent=2) + "\n")
    logger.info("configuration:\n%s", json.dumps(built.full_config, indent=2))
    logger.info("model summary:\n%s", _model_summary(built.model))
    logger.info(
        "%d batches of %dx%d per epoch, %d steps in all, starting at step %d",
        data.batches_per_epoch,
        data.train.batch_size,
        data.train.seq_len,
        data.total_steps,
        start_step,
    )


# ------------------------------------------------------------------ stopping
def stop_error(
    reason: StopReason, last_checkpoint: str | None, spike_factor: float
) -> TrainingError | TrainingInterrupted:
    """The exception that reports why the run stopped early (`reason`, from `first_stop` or
    `SignalWatch.stop_reason`), naming the newest checkpoint: `TrainingError` for a spike
    (above --spike_factor) or a NaN loss, `TrainingInterrupted` for a signal."""
    if reason.kind == "spike":
        return TrainingError(
            f"the training loss spiked (above {spike_factor:g} x its running mean, or "
            f"NaN) at step {reason.step}; stopped without applying it, the "
            f"last checkpoint is {last_checkpoint}. Lower --max_lr, set "
            "--clipvalue, or use --spike_guard=skip."
        )
    if reason.kind == "non_finite":
        return TrainingError(
            f"the training loss became NaN or Inf near step {reason.step}; "
            f"the last good checkpoint is {last_checkpoint}. Lower --max_lr "
            "or set --clipvalue."
        )
    return TrainingInterrupted(
        f"stopped by {signal.Signals(reason.signum).name} at step "
        f"{reason.step}; checkpoint {last_checkpoint}. "
        "Run the same command again to resume.",
        reason.signum,
    )


# ------------------------------------------------------------------ pipeline
class Trainer:
    """One run: `run()` calls the stages above in order, passing each one's values on.

    It keeps what the stages return, so that a caller can look at the run afterwards
    (or, from a callback, during it): `strategy`, `paths`, `data`, `built`, `progress`,
    `evaluator`. Each is set once, by `run()`. `callbacks` run after partf's own.
    """

    def __init__(self, config: TrainConfig, callbacks: Sequence[keras.callbacks.Callback] = ()):
        self.config = config
        self.callbacks = list(callbacks)
        self.strategy: tf.distribute.Strategy | None = None
        self.paths: RunPaths | None = None
        self.data: RunData | None = None
        self.built: Built | None = None
        self.progress: RunProgress | None = None
        self.evaluator: Any = None

    # Shortcuts, for benchmarks/train_throughput.py and tests/training/test_distribution.py.
    @property
    def model(self) -> keras.Model:
        return self.built.model

    @property
    def model_config(self) -> Any:
        return self.built.model_config

    @property
    def train_split(self) -> Split:
        return self.data.train

    def run(self) -> dict[str, Any]:
        """Trains (or resumes) to the end and returns the results written to results.json.

        Raises:
            ConfigError: bad settings or inputs (the command line exits with 2).
            TrainingError: the loss became NaN or Inf, or spiked (exit 1); the last good
                checkpoint stays.
            TrainingInterrupted: SIGINT/SIGTERM; a checkpoint was written first.
        """
        config = self.config
        started = time.perf_counter()
        # Multi-worker and TPU strategies must exist before TensorFlow starts its runtime.
        self.strategy = strategy = build_strategy(config.distribution_strategy)
        self.paths = paths = run_paths(config, strategy)

        # Everything that can reject the inputs (stages 1 to 3) runs before anything is written.
        self.data = data = load_data(config)
        selection = None
        if config.drop_attention:
            selection = drop_selection(config, data, paths.checkpoints)
        table, measured = None, False
        if needs_table(config):  # --search_cost=time: the prices, read or measured now
            table, measured = cost_table(config, data, paths.checkpoints)
        rows = data.train.batch_size  # under a strategy, one replica's share
        model_config = resolve_for_run(
            config,
            data,
            rows if strategy is None else per_replica_batch(strategy, rows),
            architecture=selection.architecture if selection else None,
            candidate_costs=table.costs if table else None,
        )
        self.built = built = build_model(config, model_config, data, strategy)
        resumed = Resumed()
        if not config.overwrite:
            resumed = restore(paths.checkpoints, built, data.batches_per_epoch)
        if config.init_from and resumed.checkpoint is None:
            init_weights(built.model, config.init_from)

        prepare_output(paths, config)
        if selection is not None:
            write_selection(paths.checkpoints, selection)
        if measured:
            write_cost_table(paths.checkpoints, table)
        clock = Clock(started, before=resumed.elapsed_seconds)
        manager = CheckpointManager(paths.checkpoints, keep=config.keep_checkpoints)
        save = CheckpointWriter(manager, built, clock)
        with _log_to_file(paths.training_log):
            log_run_start(paths, built, data, resumed.step)

            def new_evaluator(mode: str | None = None, accuracy: bool | None = None) -> Any:
                # A drawn task is scored by its exact answers, beside the loss.
                accuracy = data.scored if accuracy is None else accuracy
                return make_evaluator(
                    built.model, strategy, data.train.batch_size, config.jit_compile, mode, accuracy
                )

            self.evaluator = evaluator = new_evaluator()
            # --recall_directory: a task's split scored by its answers at the end.
            recall = new_evaluator(accuracy=True) if data.recall is not None else None
            self.progress = progress = RunProgress(
                data.batches_per_epoch, data.total_steps, data.tokens_per_batch
            )
            progress.move_to(resumed.step)

            # A search evaluated by argmax also scores the expected mixture: while pi is
            # frozen (validation) and at the end (results.json "expected_weights").
            expected = expected_evaluator(built.model, new_evaluator)
            own = make_callbacks(
                config, paths, built, data, progress, evaluator, resumed, save, expected
            )
            try:
                with own.signals.installed():
                    # After partf's (the tracker keeps `progress` current first).
                    console = ConsoleProgress(
                        progress,
                        config.steps_per_execution,
                        config.jit_compile,
                        lr_value=built.schedule.value_at,
                    )
                    callbacks = [*own.as_list(), console, *self.callbacks]
                    history = run_fit(built.model, data, progress, callbacks, strategy)
            finally:
                own.writers.flush()
            stop = own.stop_reason(progress.global_step)
            if stop is not None:
                raise stop_error(stop, own.checkpointer.last_checkpoint, config.spike_factor)

            validation = own.validation
            trained = Trained(
                step=progress.global_step,
                train_loss=history["loss"][-1] if history.get("loss") else resumed.train_loss,
                valid_report=validation.report if validation else None,
                valid_report_step=validation.report_step if validation else None,
            )
            return finish(
                config,
                paths,
                built,
                data,
                evaluator,
                trained,
                own.writers.valid,
                clock,
                expected,
                recall,
            )


def drop_selection(config: TrainConfig, data: RunData, checkpoints: Path) -> Selection:
    """The blocks --drop_attention replaces (by --drop_attention_to's mechanism): those
    this run chose before (a resume, refused if it chose another mechanism), or chosen
    now by scoring the --init_from run on the validation split."""
    if config.model.architecture is not None:
        raise ConfigError(
            "--drop_attention chooses the architecture (the source's, with the chosen "
            "blocks as --drop_attention_to's identity or mechanism); leave out --architecture."
        )
    if not config.overwrite:
        earlier = read_selection(checkpoints, config.drop_attention_to)
        if earlier is not None:
            logger.info("--drop_attention: %s as chosen before", earlier.architecture)
            return earlier
    if data.valid is None:
        raise ConfigError(
            "--drop_attention scores the source run on the validation split; give "
            "--valid_directory."
        )
    return select_dropped(
        config.init_from,
        config.drop_attention,
        data.valid,
        config.jit_compile,
        mechanism=config.drop_attention_to,
        seed=config.seed,
        options=config.model.attention_options,
    )


def train(config: TrainConfig, callbacks: Sequence[keras.callbacks.Callback] = ()) -> dict:
    """Runs (or resumes) one training run with extra Keras `callbacks`; returns the results
    also written to checkpoints/<model_name>/results.json (see `Trainer.run`)."""
    return Trainer(config, callbacks).run()
