"""Killed runs resume to the same result: SIGKILL at several points (one in the middle of
a checkpoint write), SIGTERM and SIGINT checkpoint and exit within seconds.

The run under test is a subprocess of `python -m partf.train` on a tiny model (12 steps,
a checkpoint every 3). `PARTF_TEST_WRITE_PAUSE` makes every atomic write pause half-way
(see `partf.atomic._write_all`), so a kill can land inside one. The
uninterrupted reference runs in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from partf.cli.train import main
from partf.run_folder import RunFolder, read_checkpoint

STEPS = 12


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Random tokens (vocabulary 60), 12 batches of 4 x 8."""
    from partf.data import context_batches, write_tfrecords

    root = tmp_path_factory.mktemp("interrupt_records")
    stream = np.random.default_rng(0).integers(1, 60, size=STEPS * 4 * 8 + 1).astype(np.int32)
    write_tfrecords(
        context_batches(stream, 4, 8), root / "train", vocab_size=60, num_tokens=len(stream)
    )
    return root / "train"


def _argv(records: Path, out: Path) -> list[str]:
    return [
        f"--train_directory={records}",
        "--valid_directory=",
        "--test_directory=",
        "--d_model=8",
        "--num_heads=2",
        "--d_ffn=16",
        "--num_layers=2",
        "--mem_len=4",
        "--cutoffs=20",
        "--dropout_rate=0.1",  # random state must resume too
        "--epochs=1",
        "--nojit_compile",
        "--steps_per_execution=1",
        "--ckpt_every=3",
        "--log_every=3",
        "--max_lr=3e-3",
        "--warmup_steps=2",
        f"--output_dir={out}",
        "--model_name=run",
    ]


@pytest.fixture(scope="module")
def reference(records, tmp_path_factory):
    """The uninterrupted run: (results, final model arrays)."""
    out = tmp_path_factory.mktemp("reference")
    assert main(_argv(records, out)) == 0
    return _outcome(out)


def _outcome(out: Path):
    folder = out / "checkpoints" / "run"
    results = json.loads((folder / "results.json").read_text())
    groups, meta = read_checkpoint(folder / f"ckpt-{STEPS:08d}.npz")
    return results, groups


def _start(records: Path, out: Path, pause: float) -> subprocess.Popen:
    env = dict(os.environ, PARTF_TEST_WRITE_PAUSE=str(pause), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen(
        [sys.executable, "-m", "partf.train", *_argv(records, out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(process: subprocess.Popen, found, timeout: float = 120.0):
    """Polls until `found()` is truthy; fails if the process ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hit = found()
        if hit:
            return hit
        if process.poll() is not None:
            pytest.fail(f"the run ended (status {process.returncode}) before the kill point")
        time.sleep(0.02)
    process.kill()
    pytest.fail("kill point not reached in time")


def _temp_checkpoint(folder: Path):
    return [p for p in folder.glob(".tmp-*") if "ckpt-" in p.name] if folder.is_dir() else []


def _kill(process: subprocess.Popen, signum: int = signal.SIGKILL) -> None:
    process.send_signal(signum)
    process.wait(timeout=30)


def _assert_same_result(out: Path, reference) -> None:
    results, groups = _outcome(out)
    want_results, want_groups = reference
    assert results["steps"] == STEPS
    assert results["train"]["loss"] == pytest.approx(want_results["train"]["loss"], rel=1e-6)
    for name in ("model", "optimizer"):
        for got, want in zip(groups[name], want_groups[name], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not _temp_checkpoint(out / "checkpoints" / "run"), "killed writers' files cleaned up"


@pytest.mark.slow  # about 45 s: a subprocess and two in-process runs, each tracing its step
def test_sigkill_inside_a_checkpoint_write_then_resume(records, reference, tmp_path):
    folder = tmp_path / "checkpoints" / "run"
    process = _start(records, tmp_path, pause=1.0)
    # The second checkpoint (step 6) is half written when the kill lands.
    _wait_for(process, lambda: any("00000006" in p.name for p in _temp_checkpoint(folder)))
    _kill(process)
    assert [p.name for _, p in RunFolder(folder).checkpoints()] == ["ckpt-00000003.npz"]
    assert RunFolder(folder).newest_checkpoint() is not None  # the latest one loads
    assert main(_argv(records, tmp_path)) == 0
    _assert_same_result(tmp_path, reference)


@pytest.mark.slow
def test_kills_at_several_points_then_resume(records, reference, tmp_path):
    """SIGKILL before the first checkpoint, SIGTERM (clean exit, 143, within seconds),
    SIGKILL inside a write, SIGINT, SIGKILL right after a checkpoint; then resume."""
    folder = tmp_path / "checkpoints" / "run"

    def newest() -> int:
        found = RunFolder(folder).checkpoints()
        return found[-1][0] if found else 0

    # 1. Before any checkpoint: config.json is written at the start of training.
    process = _start(records, tmp_path, pause=1.0)
    _wait_for(process, lambda: (folder / "config.json").exists())
    _kill(process)
    assert newest() == 0

    # 2. SIGTERM once the first checkpoint is there: a checkpoint, exit 143, quickly.
    for signum in (signal.SIGTERM, signal.SIGINT):
        before = newest()
        process = _start(records, tmp_path, pause=0.3)
        _wait_for(process, lambda before=before: newest() > before)
        sent = time.monotonic()
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
        assert time.monotonic() - sent < 15
        assert process.returncode == 128 + signum, err
        assert err.strip().splitlines()[-1].startswith("partf-train: error: stopped by")
        assert "Run the same command again to resume" in err

    # 3. Inside a checkpoint write.
    process = _start(records, tmp_path, pause=1.0)
    _wait_for(process, lambda: _temp_checkpoint(folder))
    _kill(process)
    assert RunFolder(folder).newest_checkpoint() is not None

    # 4. Right after a checkpoint was renamed into place.
    before = newest()
    process = _start(records, tmp_path, pause=0.0)
    _wait_for(process, lambda: newest() > before)
    _kill(process)

    # Resume whatever happened: stage 4 may have been killed right after the last
    # checkpoint (when a signal was handled late, stages 3 and 4 start from the same
    # step), before results.json was written. Resuming at the last step writes them.
    assert main(_argv(records, tmp_path)) == 0
    _assert_same_result(tmp_path, reference)
