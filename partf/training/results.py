"""The end of a run: the final scores, results.json, the pi animation and the model.

`finish(...)` scores the validation and test splits (each with its own memory, starting
empty; the validation of the last step is reused) and, with --recall_directory, the
MQAR split by its answers ("recall"), then writes everything a finished run leaves and
returns the results.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np

from partf.atomic import atomic_path, atomic_write_text
from partf.models.cost import expected_flops, model_flops, training_flops_per_token
from partf.serialization import FORMAT_KEY, FORMAT_VERSION
from partf.training.build import Built
from partf.training.config import TrainConfig
from partf.training.evaluation.perplexity import score
from partf.training.paths import RunPaths
from partf.training.plots import make_gif, save_pi_heatmap
from partf.training.run_state import Clock, read_tau
from partf.training.splits import RunData
from partf.training.summaries import write_scalars

logger = logging.getLogger("partf.training")


@dataclasses.dataclass(frozen=True)
class Trained:
    """Where the `fit` calls left the run: `train_loss` is the last epoch's mean loss
    (without a `fit` call, a run resumed at its end, the checkpoint's), `valid_report` the
    newest validation figures and `valid_report_step` their step."""

    step: int
    train_loss: float | None
    valid_report: dict[str, Any] | None = None
    valid_report_step: int | None = None


def finish(
    config: TrainConfig,
    paths: RunPaths,
    built: Built,
    data: RunData,
    evaluator: Any,
    trained: Trained,
    valid_writer: Any,
    clock: Clock,
    expected: Any = None,
    recall_evaluator: Any = None,
) -> dict[str, Any]:
    """Scores the splits, saves the model, writes results.json and returns its results.
    `expected`: a search's evaluator with expected block weights, for "expected_weights";
    `recall_evaluator` scores `data.recall` (--recall_directory) by its answers, for
    "recall" and the validation writer's recall_* scalars.
    """
    model, step = built.model, trained.step
    pi = np.asarray(model.pi())
    last_frame = paths.plots / f"step{step}.png"
    if not last_frame.is_file():  # PiPlotter drew it, unless no step was trained here
        save_pi_heatmap(pi, model.candidate_names, last_frame, f"Iteration {step}")
    frames = make_gif(paths.plots, paths.plots / "pi.gif")
    logger.info("pi animation: %s (%d frames)", paths.plots / "pi.gif", frames)
    scores, expected_scores, seconds = {}, {}, {}
    for name, split in (("valid", data.valid), ("test", data.test)):
        if split is None:
            continue
        if name == "valid" and trained.valid_report_step == step:
            report = trained.valid_report  # scored at this very step already
        else:
            report, seconds[name] = timed_score(evaluator, split, name)
        scores[name] = report
        _log_scores(name, report)
        if expected is not None:
            logger.info("scoring the %s split with expected block weights", name)
            report = score(expected, split.dataset, name, *_sizes(split))
            expected_scores[name] = report
            _log_scores(f"{name} (expected block weights)", report)
    recall, final = None, {}
    if data.recall is not None:
        recall, seconds["recall"] = timed_score(recall_evaluator, data.recall, "recall")
        accuracy, answers = 100.0 * recall["accuracy"], recall["num_tokens"]
        logger.info(
            "recall: loss %.4f, accuracy %.2f%% of %d answers", recall["loss"], accuracy, answers
        )
        final = {"recall_loss": recall["loss"], "recall_accuracy": recall["accuracy"]}
    if "valid" in scores:
        final["final_perplexity"] = scores["valid"]["perplexity"]
    if final:
        write_scalars(valid_writer, step, final)
        valid_writer.flush()
    train_loss = trained.train_loss
    results = {
        FORMAT_KEY: FORMAT_VERSION,  # partf.serialization: readers refuse other formats
        "model_name": config.model_name,
        "steps": step,
        # "epochs" is the --epochs asked for; a run cut short by --max_steps (or resumed
        # to a new end) ran a different amount, which the two keys after it give.
        "epochs": config.epochs,
        "epochs_run": round(step / data.batches_per_epoch, 4),
        "epochs_completed": step // data.batches_per_epoch,
        "max_steps": config.max_steps,
        "wall_time_seconds": clock.seconds(),
        "train": {
            "loss": train_loss,
            "perplexity": math.exp(train_loss) if train_loss is not None else None,
        },
        "valid": scores.get("valid"),
        "test": scores.get("test"),
        # --recall_directory: the MQAR split's answers, scored after the test split.
        "recall": recall,
        # A search scored by argmax: the same splits with the expected mixture of pi.
        "expected_weights": expected_scores or None,
        "objective": config.objective,
        "tau": read_tau(model),
        "pi": pi.tolist(),
        "candidates": list(model.candidate_names),
        "architecture": model.architecture_string(),
        # Forward FLOPs per token at this run's segment length: the discrete architecture
        # (blocks, output layer, total) and, for a search, the blocks expected under pi.
        "flops_per_token": None if data.masking else model_flops(model, data.train.seq_len),
        # This run's training compute: 3 x the forward FLOPs per token as it trained (a
        # search's every candidate) x the tokens of its steps. A run started with
        # --init_from adds its source's (partf-study's report sums the chain).
        "train_flops": None if data.masking else train_flops(model, data, step),
        # The batch shape, and the milliseconds per batch of the final passes (a pass's
        # first call compiles its program on JAX, so small splits read high there).
        "data": {
            "batch_size": data.train.batch_size,
            "seq_len": data.train.seq_len,
            "batches_per_epoch": data.batches_per_epoch,
        },
        "eval_ms_per_batch": {name: 1000.0 * secs for name, secs in seconds.items()},
        "search": search_summary(config, built, data),
        "config": built.full_config,
    }
    save_model(model, paths.folder.model_file)
    atomic_write_text(paths.folder.results_path, json.dumps(results, indent=2) + "\n")
    logger.info(
        "done: %d steps in %.0fs; architecture %s; results in %s",
        step,
        results["wall_time_seconds"],
        results["architecture"],
        paths.folder.results_path,
    )
    return results


def timed_score(evaluator: Any, split: Any, name: str) -> tuple[dict[str, Any], float]:
    """`split`'s `perplexity_report` by `evaluator`, and the seconds it took per batch:
    the evaluation latency this run measured (partf-study's report shows it)."""
    # The final passes take a while (about a minute on 2 CPU cores for WikiText-2's
    # valid and test); say what runs instead of going quiet.
    logger.info("scoring the %s split (%d batches)", name, split.num_batches)
    began = time.perf_counter()
    report = score(evaluator, split.dataset, name, *_sizes(split))
    return report, (time.perf_counter() - began) / max(split.num_batches, 1)


def train_flops(model: keras.Model, data: RunData, steps: int) -> dict[str, float]:
    """{"per_token": forward FLOPs per token as trained, "tokens": tokens trained on,
    "total": 3 x their product} (`partf.models.cost.training_flops_per_token`)."""
    per_token = training_flops_per_token(model, data.train.seq_len)
    tokens = float(steps * data.tokens_per_batch)
    return {"per_token": per_token, "tokens": tokens, "total": 3.0 * per_token * tokens}


def search_summary(config: TrainConfig, built: Built, data: RunData) -> dict[str, Any] | None:
    """How the architecture logits were trained (the preset resolved), and the blocks'
    FLOPs per token expected under the final pi; None for a fixed architecture. The
    encoder of --objective=mlm has no FLOP counts here (expected_flops_per_token None)."""
    model = built.model
    if not built.model_config.is_stochastic:
        return None
    arch = config.arch_settings(data.total_steps)
    expected = None
    if data.masking is None:
        expected = float(keras.ops.convert_to_numpy(expected_flops(model, data.train.seq_len)))
    return {
        "preset": config.search,
        "estimator": built.model_config.search_estimator,
        "cost_weight": built.model_config.search_cost_weight,
        "arch_lr": arch.lr,
        "arch_weight_decay": arch.weight_decay,
        "arch_freeze_steps": arch.freeze_steps,
        "expected_flops_per_token": expected,
    }


def save_model(model: keras.Model, final: Path) -> None:
    """Saves the model as .keras (atomically: written aside, then renamed)."""
    with atomic_path(final) as tmp:
        model.save(tmp)
    logger.info("model saved to %s", final)


def _sizes(split: Any) -> tuple[int, int, dict[str, int | None]]:
    """`score`'s batches, tokens per batch and text counts of a split."""
    return split.num_batches, split.batch_size * split.seq_len, split.text_counts


def _log_scores(name: str, report: dict[str, Any]) -> None:
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


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
