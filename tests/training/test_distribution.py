"""Training under tf.distribute equals training on one device with the same global batch.

Logical CPU devices must be configured before TensorFlow initialises, so every check runs
in a fresh Python process (the script below). It writes tiny records (vocabulary 60,
batches of 4 rows x 8 tokens), trains a tiny model (d_model 16, two blocks, dropout 0,
Gumbel noise on: every replica draws the same sample, as one device would) and records
the running loss after every step and the final training memory.

- mirrored: one process, two logical CPU devices; a one-device run in the same process is
  the reference. The memory rows of replica k must equal rows [2k, 2k+2) of the reference.
- multi_worker (slow): two processes on loopback ports (TF_CONFIG), one CPU each.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import tensorflow as tf

    mode, root, out = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
    import keras
    from partf.data import context_batches, write_tfrecords
    from partf.training.config import TrainConfig
    from partf.training.trainer import Trainer

    records = os.path.join(root, "records")
    if not os.path.isdir(records):
        stream = np.random.default_rng(0).integers(1, 60, 6 * 4 * 8 + 1).astype("int32")
        write_tfrecords(context_batches(stream, 4, 8), records, vocab_size=60,
                        num_tokens=len(stream))

    class Losses(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.values = []

        def on_train_batch_end(self, batch, logs=None):
            self.values.append(float(logs["loss"]))

    def run(strategy, name):
        losses = Losses()
        config = TrainConfig(
            train_directory=records, valid_directory=records, test_directory="",
            model_name=name, output_dir=os.path.join(root, "runs"), epochs=1,
            max_lr=1e-2, warmup_steps=0, lr_schedule="constant", steps_per_execution=1,
            jit_compile=False, log_every=1000, plot_every=1000, overwrite=True,
            distribution_strategy=strategy,
            model={"d_model": 16, "num_heads": 2, "d_ffn": 32, "num_layers": 2,
                   "mem_len": 8, "cutoffs": (20,), "dropout_rate": 0.0},
        )
        trainer = Trainer(config, [losses])
        results = trainer.run()
        # The validation pass in chunks (the iterator and the memory carried between
        # them) gives the sums of one pass.
        import partf.training.evaluation.perplexity as perplexity
        whole = trainer.evaluator.evaluate(trainer.data.valid.dataset)
        perplexity.CHUNK, done = 4, []
        chunked = trainer.evaluator.evaluate(trainer.data.valid.dataset, progress=done.append)
        perplexity.CHUNK = 32
        memory = [np.asarray(v.numpy()).tolist() for v in
                  __import__("partf.training.distribution", fromlist=["x"]).checkpoint_view(
                      trainer.model._state_vars("train"))]
        return {"losses": losses.values, "memory": memory,
                "valid_loss": results["valid"]["loss"],
                "chunks": done, "chunked_sums": [chunked.total_nll, chunked.num_tokens],
                "one_pass_sums": [whole.total_nll, whole.num_tokens],
                "replicas": trainer.strategy.num_replicas_in_sync if trainer.strategy else 1}

    report = {}
    if mode == "mirrored":
        report["single"] = run("default", "single")
        report["distributed"] = run("mirrored", "mirrored")
    else:
        task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        report["distributed"] = run("multi_worker", "multi")
        report["task"] = task
    with open(out, "w") as f:
        json.dump(report, f)
    """
)


def _run_script(mode: str, root: Path, out: Path, env: dict[str, str] | None = None, wait=True):
    script = root / "run.py"
    script.write_text(SCRIPT)
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    command = [sys.executable, str(script), mode, str(root), str(out)]
    if not wait:
        return subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, text=True)
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _assert_same_run(single: dict, distributed: dict) -> None:
    np.testing.assert_allclose(distributed["losses"], single["losses"], rtol=2e-5, atol=2e-5)
    assert len(single["losses"]) == 6
    for replica_rows, reference in zip(distributed["memory"], single["memory"], strict=True):
        np.testing.assert_allclose(replica_rows, reference, rtol=1e-4, atol=2e-5)
    # the memory is really carried (not empty), so comparing it is meaningful
    assert np.abs(np.asarray(single["memory"][0])).max() > 1e-3
    np.testing.assert_allclose(distributed["valid_loss"], single["valid_loss"], rtol=2e-5)
    # Exactly: float64 sums of the same float32 batch sums. (The one-device evaluator
    # without XLA takes whole chunks of at most 4; the replicas' one 2 balanced chunks.)
    assert single["chunks"] == [4, 6] and distributed["chunks"] == [3, 6]
    for run in (single, distributed):
        assert run["chunked_sums"] == run["one_pass_sums"]


@pytest.mark.slow  # numerics of a strategy: about 50 s
def test_mirrored_two_cpus_match_one_device(tmp_path):
    report = _run_script("mirrored", tmp_path, tmp_path / "report.json")
    assert report["distributed"]["replicas"] == 2
    _assert_same_run(report["single"], report["distributed"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_multi_worker_two_processes_match_one_device(tmp_path):
    reference = _run_script("mirrored", tmp_path, tmp_path / "reference.json")["single"]
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(
            _run_script(
                "multi_worker",
                tmp_path,
                tmp_path / f"worker{index}.json",
                {"TF_CONFIG": json.dumps(tf_config)},
                wait=False,
            )
        )
    for process in processes:
        _, stderr = process.communicate(timeout=400)
        assert process.returncode == 0, stderr[-3000:]
    reports = [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in range(2)]
    for report in reports:
        assert report["distributed"]["replicas"] == 2
        np.testing.assert_allclose(
            report["distributed"]["losses"], reference["losses"], rtol=2e-5, atol=2e-5
        )
    # worker i holds rows [2i, 2i+2) of the one-device memory
    for index, report in enumerate(reports):
        for mine, full in zip(report["distributed"]["memory"], reference["memory"], strict=True):
            np.testing.assert_allclose(
                mine, np.asarray(full)[2 * index : 2 * index + 2], rtol=1e-4, atol=2e-5
            )
