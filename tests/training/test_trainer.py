"""The trainer end to end on fixture records: artifacts, TensorBoard, resume.

Two tiny runs are shared through fixtures: one XLA-compiled run with every artifact
(`trained_run`, tests/training/conftest.py, which test_results.py reads too), and
(without XLA, to stay cheap) an uninterrupted run next to one stopped by SIGINT and
resumed.
"""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path

import numpy as np
import pytest

from partf.serialization import FORMAT_VERSION
from partf.training.config import ConfigError, TrainConfig
from partf.training.lr_schedules import WarmupCosine
from partf.training.trainer import RunPaths, train
from tests.training.helpers import (
    TINY,
    interrupted_and_whole,
    tensorboard_scalars,
)


def test_every_artifact_is_written(trained_run):
    config, results, paths = trained_run
    written = json.loads((paths.checkpoints / "config.json").read_text())
    assert written["model"]["d_model"] == 16 and written["format"] == FORMAT_VERSION
    steps = [step for step, _ in paths.folder.checkpoints()]
    assert steps[-1] == 24 and 1 < len(steps) <= 5
    assert json.loads(paths.folder.results_path.read_text()) == json.loads(json.dumps(results))
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
    assert paths.folder.model_file.is_file()
    assert not list(paths.checkpoints.glob(".tmp-*"))


def test_tensorboard_scalars(trained_run):
    config, results, paths = trained_run
    train_scalars = tensorboard_scalars(paths.logs / "train")
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
    valid_scalars = tensorboard_scalars(paths.logs / "valid")
    assert [step for step, _ in valid_scalars["loss"]] == [12, 20, 24]  # epoch ends, eval_every
    assert valid_scalars["perplexity"][-1][1] == pytest.approx(
        results["valid"]["perplexity"], rel=1e-5
    )
    assert "perplexity_original" in valid_scalars


@pytest.fixture(scope="module")
def resumed(trainer_records, tmp_path_factory):
    """Uninterrupted and interrupted-then-resumed runs of 2 epochs of 6 batches (no XLA)."""
    run = interrupted_and_whole(
        trainer_records,
        tmp_path_factory,
        train_directory=str(trainer_records[0] / "train6"),
        valid_directory="",
        jit_compile=False,
        steps_per_execution=2,
        ckpt_every=0,
        eval_every=0,
        log_every=3,
    )
    return (
        run.whole,
        run.whole_results,
        run.split,
        run.resumed_results,
        run.stopped,
        run.checkpoints,
    )


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
    a, _, _ = RunPaths(Path(whole.output_dir), "tiny").folder.newest_checkpoint()
    b, _, _ = RunPaths(Path(split.output_dir), "tiny").folder.newest_checkpoint()
    for group in ("model", "optimizer"):
        for x, y in zip(a[group], b[group], strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_resuming_with_another_configuration_is_refused(resumed, trainer_records):
    _, _, split, _, _, _ = resumed
    changed = TrainConfig(**{**split.to_dict(), "model": dict(TINY, d_ffn=48)})
    with pytest.raises(ConfigError, match=r"another configuration \(d_ffn: 32 -> 48"):
        train(changed)
