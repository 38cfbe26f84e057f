"""The trainer end to end on fixture records: artifacts, TensorBoard, resume, segments.

Two tiny runs are shared through module fixtures: one XLA-compiled run with every
artifact, and (without XLA, to stay cheap) an uninterrupted run next to one stopped by
SIGINT and resumed.
"""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from partf.serialization import FORMAT_VERSION
from partf.training.checkpoint import CheckpointManager
from partf.training.config import ConfigError, TrainConfig
from partf.training.evaluation.perplexity import Evaluator
from partf.training.lr_schedules import WarmupCosine
from partf.training.run_state import Segment
from partf.training.trainer import RunPaths, TrainingInterrupted, plan_segments, train
from tests.training.helpers import TINY
from tests.training.helpers import TRAIN_VOCAB as VOCAB


def _markov_stream(num_tokens: int, seed: int) -> np.ndarray:
    """Token ids 1..VOCAB-1 from a sparse first-order Markov chain: learnable text."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(1, VOCAB, size=(VOCAB, 3))
    stream = np.empty(num_tokens, np.int32)
    stream[0] = 1
    choices = rng.integers(0, 3, size=num_tokens)
    for t in range(1, num_tokens):
        stream[t] = successors[stream[t - 1], choices[t]]
    return stream


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Record folders with metadata (vocabulary 200, batches 8 x 16): train (12 batches),
    train6 (6), valid (3), test (3)."""
    from partf.data import context_batches, write_tfrecords

    root = tmp_path_factory.mktemp("records")
    for name, num_batches, seed in (
        ("train", 12, 0),
        ("train6", 6, 0),
        ("valid", 3, 1),
        ("test", 3, 2),
    ):
        stream = _markov_stream(num_batches * 8 * 16 + 1, seed)
        write_tfrecords(
            context_batches(stream, 8, 16),
            root / name,
            vocab_size=VOCAB,
            num_tokens=len(stream),
            num_lines=40 * num_batches,
            num_words=80 * num_batches,
            num_chars=600 * num_batches,
        )
    return root, ""


def _config(records, out, **changes):
    root, tokenizer = records
    values = dict(
        train_directory=str(root / "train"),
        valid_directory=str(root / "valid"),
        test_directory=str(root / "test"),
        sp_model_prefix=tokenizer,
        model_name="tiny",
        output_dir=str(out),
        epochs=2,
        max_lr=3e-3,
        warmup_steps=4,
        steps_per_execution=4,
        log_every=2,
        plot_every=8,
        ckpt_every=5,
        eval_every=10,
        model=dict(TINY),
    )
    values.update(changes)
    return TrainConfig(**values)


@pytest.fixture(scope="module")
def run(records, tmp_path_factory):
    """One XLA-compiled run: 2 epochs of 12 batches, 4 steps per execution, pi frozen for
    the first epoch."""
    config = _config(records, tmp_path_factory.mktemp("run"), arch_freeze_steps=12)
    results = train(config)
    return config, results, RunPaths(Path(config.output_dir), "tiny")


def _scalars(folder):
    accumulator = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    accumulator.Reload()
    values = {}
    for tag in accumulator.Tags()["tensors"]:
        events = accumulator.Tensors(tag)
        if events and events[0].tensor_proto.dtype != tf.string.as_datatype_enum:
            values[tag] = [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events]
        else:
            values[tag] = [(e.step, None) for e in events]
    return values


def test_every_artifact_is_written(run):
    config, results, paths = run
    written = json.loads((paths.checkpoints / "config.json").read_text())
    assert written["model"]["d_model"] == 16 and written["format"] == FORMAT_VERSION
    steps = [step for step, _ in CheckpointManager(paths.checkpoints).checkpoints()]
    assert steps[-1] == 24 and 1 < len(steps) <= 5
    assert json.loads(paths.results.read_text()) == json.loads(json.dumps(results))
    log = paths.training_log.read_text()
    expected_lines = ('"d_model": 16', "Total params", "step 24/24", "validation at step")
    # The final passes say what they score (valid was scored at step 24 already).
    expected_lines += ("scoring the test split (3 batches)",)
    for expected in expected_lines:
        assert expected in log
    # While pi is frozen its argmax is each block's first candidate: the mixture is scored.
    assert "validation at step 12 with expected block weights (pi frozen until step 12)" in log
    assert "validation at step 20: loss" in log and "validation at step 24: loss" in log
    assert (paths.logs / "train").is_dir() and (paths.logs / "valid").is_dir()
    frames = sorted(p.name for p in paths.plots.glob("step*.png"))
    assert frames == ["step16.png", "step24.png", "step8.png"]
    assert (paths.plots / "pi.gif").stat().st_size > 0
    assert paths.model_file.is_file()
    assert not list(paths.checkpoints.glob(".tmp-*"))


def test_results_hold_every_figure(run):
    config, results, _ = run
    assert results["steps"] == 24
    assert results["wall_time_seconds"] > 0
    assert math.isfinite(results["train"]["loss"])
    for split in ("valid", "test"):
        report = results[split]
        assert report["num_tokens"] == 3 * 8 * 16 and report["num_batches"] == 3
        assert report["perplexity"] == pytest.approx(math.exp(report["loss"]))
        # Equal batches: the mean of exp(batch loss) is at least exp(mean loss) (Jensen).
        assert report["perplexity_original"] >= report["perplexity"]
        # Word-level and per-character figures from the records' metadata.json.
        words, chars = 3 * (80 + 40), 3 * 600
        total_nll = report["loss"] * report["num_tokens"]
        assert report["word_perplexity"] == pytest.approx(math.exp(total_nll / words))
        assert report["bits_per_character"] == pytest.approx(total_nll / chars / math.log(2))
    # The search (argmax evaluation) is also scored with the expected mixture of pi.
    for split in ("valid", "test"):
        mixture, argmax = results["expected_weights"][split], results[split]
        assert mixture["num_tokens"] == argmax["num_tokens"]
        assert mixture["loss"] != pytest.approx(argmax["loss"], rel=1e-6)
    pi = np.array(results["pi"])
    assert pi.shape == (2, 3)
    np.testing.assert_allclose(pi.sum(axis=1), 1.0, rtol=1e-5)
    assert len(results["architecture"].split()) == 2
    assert results["tau"] == pytest.approx(0.1, rel=1e-4)
    assert results["config"]["model"]["tau_steps"] == 24
    # The model config is stored once, resolved: the training settings do not repeat it.
    assert results["config"]["training"] == config.training_dict()
    assert "model" not in results["config"]["training"]


def test_tensorboard_scalars(run):
    config, results, paths = run
    train_scalars = _scalars(paths.logs / "train")
    names = ["loss", "perplexity", "lr", "tau", "tokens_per_second", "pi"]
    names += [f"pi/block_{b}/{c}" for b in range(2) for c in ("attention", "dense", "identity")]
    for name in names:
        assert train_scalars.get(name), f"no {name!r} in TensorBoard"
    loss = dict(train_scalars["loss"])
    assert sorted(loss) == [4, 8, 12, 16, 20, 24]  # the execution ends past each multiple of 2
    assert loss[24] < loss[4]  # it learns the Markov chain
    for step, value in train_scalars["perplexity"]:
        assert value == pytest.approx(math.exp(loss[step]), rel=1e-4)
    schedule = WarmupCosine(config.max_lr, config.warmup_steps, 24)
    for step, value in train_scalars["lr"]:
        assert value == pytest.approx(schedule.value_at(step - 1), rel=1e-5)
    tau = [value for _, value in sorted(train_scalars["tau"])]
    assert all(a > b for a, b in zip(tau, tau[1:], strict=False))
    assert 0.1 <= tau[-1] < tau[0] < 1.0
    assert tau[-1] == pytest.approx(0.1, rel=1e-4)
    # tau anneals exponentially from tau_start=1.0 to tau_end=0.1 over the 24 steps.
    for step, value in train_scalars["tau"]:
        assert value == pytest.approx(0.1 ** (step / 24), rel=1e-4)
    assert all(value > 0 for _, value in train_scalars["tokens_per_second"])
    for step in loss:
        row = [
            dict(train_scalars[f"pi/block_0/{c}"])[step] for c in ("attention", "dense", "identity")
        ]
        assert sum(row) == pytest.approx(1.0, rel=1e-5)
    valid_scalars = _scalars(paths.logs / "valid")
    assert [step for step, _ in valid_scalars["loss"]] == [12, 20, 24]  # epoch ends, eval_every
    assert valid_scalars["perplexity"][-1][1] == pytest.approx(
        results["valid"]["perplexity"], rel=1e-5
    )
    assert "perplexity_original" in valid_scalars


def test_saved_model_loads_and_scores_the_same(run, records):
    _, results, paths = run
    model = keras.saving.load_model(paths.model_file)
    np.testing.assert_allclose(model.pi(), results["pi"], rtol=1e-6)
    root, _ = records
    from partf.data import load_tfrecords

    stats = Evaluator(model, jit_compile=False).evaluate(load_tfrecords(root / "test"))
    assert stats.total_nll / stats.num_tokens == pytest.approx(results["test"]["loss"], rel=1e-5)


class _SigintAt(keras.callbacks.Callback):
    """Sends SIGINT to this process at the first execution ending past `batch`."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch
        self.sent = False

    def on_train_batch_end(self, batch, logs=None):
        if batch >= self.batch and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


def test_a_run_cut_by_max_steps_says_what_it_ran(records, tmp_path, capfd):
    """results.json: "epochs" is what was asked; epochs_run, epochs_completed and steps
    what ran. The heatmap of the last step is written though no plot_every multiple came.
    The console says what is compiled before the first step."""
    config = _config(
        records, tmp_path, train_directory=str(records[0] / "train6"), valid_directory="",
        test_directory="", jit_compile=False, steps_per_execution=3, max_steps=9,
        ckpt_every=0, eval_every=0, log_every=3, plot_every=100,
    )  # fmt: skip
    results = train(config)
    assert (results["steps"], results["epochs"], results["max_steps"]) == (9, 2, 9)
    assert (results["epochs_run"], results["epochs_completed"]) == (1.5, 1)
    paths = RunPaths(Path(config.output_dir), "tiny")
    assert [p.name for p in paths.plots.glob("step*.png")] == ["step9.png"]
    assert [step for step, _ in _scalars(paths.logs / "train")["pi"]] == [9]
    notice = "partf: compiling the train step (graph, no XLA, 3 steps per execution) before "
    assert notice + "step 0 of 9;" in capfd.readouterr().err


@pytest.fixture(scope="module")
def resumed(records, tmp_path_factory):
    """Uninterrupted and interrupted-then-resumed runs of 2 epochs of 6 batches (no XLA)."""
    common = dict(
        train_directory=str(records[0] / "train6"),
        valid_directory="",
        jit_compile=False,
        steps_per_execution=2,
        ckpt_every=0,
        eval_every=0,
        log_every=3,
    )
    whole = _config(records, tmp_path_factory.mktemp("whole"), **common)
    whole_results = train(whole)
    split = _config(records, tmp_path_factory.mktemp("split"), **common)
    with pytest.raises(TrainingInterrupted) as stopped:
        train(split, callbacks=[_SigintAt(batch=1)])
    checkpoints = CheckpointManager(
        RunPaths(Path(split.output_dir), "tiny").checkpoints
    ).checkpoints()
    resumed_results = train(split)
    return whole, whole_results, split, resumed_results, stopped.value, checkpoints


def test_interrupted_run_checkpoints_mid_epoch(resumed):
    _, _, _, _, stopped, checkpoints = resumed
    assert stopped.signum == signal.SIGINT
    # SIGINT arrived after step 2; the next execution end (step 4) saved and stopped.
    assert [step for step, _ in checkpoints] == [4]


def test_resumed_run_ends_like_an_uninterrupted_one(resumed):
    whole, whole_results, split, resumed_results, _, _ = resumed
    assert resumed_results["steps"] == whole_results["steps"] == 12
    assert resumed_results["train"]["loss"] == pytest.approx(
        whole_results["train"]["loss"], rel=1e-6
    )
    assert resumed_results["test"]["loss"] == pytest.approx(whole_results["test"]["loss"], rel=1e-6)
    np.testing.assert_allclose(resumed_results["pi"], whole_results["pi"], rtol=1e-6)
    a, _, _ = CheckpointManager(RunPaths(Path(whole.output_dir), "tiny").checkpoints).load_latest()
    b, _, _ = CheckpointManager(RunPaths(Path(split.output_dir), "tiny").checkpoints).load_latest()
    for group in ("model", "optimizer"):
        for x, y in zip(a[group], b[group], strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_resuming_with_another_configuration_is_refused(resumed, records):
    _, _, split, _, _, _ = resumed
    changed = TrainConfig(**{**split.to_dict(), "model": dict(TINY, d_ffn=48)})
    with pytest.raises(ConfigError, match=r"another configuration \(d_ffn: 32 -> 48"):
        train(changed)


@pytest.mark.parametrize(
    ("start", "total", "expected"),
    [
        (0, 30, [Segment(0, 3, 0, 10)]),
        (14, 30, [Segment(1, 2, 4, 10), Segment(2, 3, 0, 10)]),
        (0, 25, [Segment(0, 2, 0, 10), Segment(2, 3, 0, 5)]),
        (23, 25, [Segment(2, 3, 3, 5)]),
        (20, 20, []),
    ],
)
def test_plan_segments(start, total, expected):
    assert plan_segments(start, 10, total) == expected
