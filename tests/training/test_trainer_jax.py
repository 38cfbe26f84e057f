"""partf-train and partf-generate on the JAX backend, where TensorFlow cannot be imported.

Each command runs in a subprocess with KERAS_BACKEND=jax and, first on PYTHONPATH, a
folder whose `tensorflow` and `tensorflow_text` packages raise ImportError (and note the
attempt in a file, so that a caught import is seen too). The records and the tokenizer
are built here, with TensorFlow, as partf-build-data builds them.

One run (a `--search=par` over two blocks, 2 epochs of 12 batches) is the reference;
it is run again (a resume that trains nothing), interrupted by SIGTERM and resumed to
the same test perplexity, and generates text, greedily the same tokens as TensorFlow
generates from the same saved model. The subprocesses share JAX's persistent
compilation cache, so only the first compiles the train step and the evaluators.
Skipped when jax is not installed (`pip install "jax[cpu]"`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed"
)

ROOT = Path(__file__).resolve().parents[2]
BATCH, SEQ = 4, 16
#: Batches per split: 12 training batches (3 executions of 4 steps), 4 for each of valid
#: and test (one evaluation program serves both).
BATCHES = {"train": 12, "valid": 4, "test": 4}
STEPS = 2 * BATCHES["train"]
#: The blocked packages' __init__.py: notes the code that asked for the import (the
#: innermost frame outside the import machinery and partf's import hooks), then raises.
BLOCKED = """
import os, traceback
skip = ("importlib", "<frozen", os.path.join("partf", "lazy.py"), os.path.join("cli", "exits.py"))
frames = [f for f in traceback.extract_stack()[:-1] if not any(s in f.filename for s in skip)]
with open(os.environ["PARTF_TEST_IMPORTS"], "a") as notes:
    notes.write(f"{__name__} from {frames[-1].filename}:{frames[-1].name}\\n")
raise ImportError("no tensorflow here")
"""


def _cut_text(lines: list[str], sp, batches: int) -> list[str]:
    """Lines of `lines`, in order, whose tokens (one eos per line) make exactly `batches`
    context batches of BATCH x SEQ (the partial batch after them is dropped)."""
    need, have, kept = batches * BATCH * SEQ + 1, 0, []
    for line in lines:
        tokens = len(sp.encode(line)) + 1
        if have + tokens < need + BATCH * SEQ:  # a line that would overshoot is left out
            kept.append(line)
            have += tokens
        if have >= need:
            return kept
    raise AssertionError(f"cannot cut {batches} batches from the corpus")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict:
    """The blocked packages, the tokenizer, and records of exactly BATCHES batches."""
    from partf.data import build_records, load_sentencepiece, read_metadata, train_tokenizer
    from tests.data.helpers import wiki_lines, write_corpus, write_text

    root = tmp_path_factory.mktemp("jax_train")
    blocked = root / "blocked"
    for name in ("tensorflow", "tensorflow_text"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(BLOCKED)
    corpus = write_corpus(root / "corpus", train_lines=1500, eval_lines=60)
    sp_model = train_tokenizer(corpus / "train.txt", root / "tokenizer" / "tiny", vocab_size=120)
    sp = load_sentencepiece(sp_model)
    for seed, (split, batches) in enumerate(BATCHES.items()):
        text = write_text(
            root / "text" / f"{split}.txt", _cut_text(wiki_lines(200, seed=seed), sp, batches)
        )
        build_records(text, sp_model, root / "records" / split, BATCH, SEQ)
        assert read_metadata(root / "records" / split).num_batches == batches
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        PYTHONPATH=os.pathsep.join([str(blocked), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        PARTF_TEST_IMPORTS=str(root / "tensorflow_imports.txt"),
        JAX_COMPILATION_CACHE_DIR=str(root / "jax_cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
    )
    env.pop("PARTF_TEST_WRITE_PAUSE", None)
    return {"root": root, "sp_model": sp_model, "env": env}


def _train_argv(workspace: dict, out: Path) -> list[str]:
    records = workspace["root"] / "records"
    return [
        sys.executable,
        "-m",
        "partf.train",
        f"--train_directory={records / 'train'}",
        f"--valid_directory={records / 'valid'}",
        f"--test_directory={records / 'test'}",
        f"--sp_model_prefix={str(workspace['sp_model'])[: -len('.model')]}",
        "--d_model=16",
        "--num_heads=2",
        "--d_ffn=32",
        "--num_layers=2",
        "--mem_len=8",
        "--cutoffs=50",
        "--search=par",
        "--epochs=2",
        "--steps_per_execution=4",
        "--ckpt_every=4",
        "--log_every=4",
        "--eval_every=0",
        "--plot_every=8",
        "--warmup_steps=4",
        "--max_lr=3e-3",
        f"--output_dir={out}",
        "--model_name=tiny",
    ]


def _run(workspace: dict, argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        env={**workspace["env"], **env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=workspace["root"],
    )


def _results(out: Path) -> dict:
    return json.loads((out / "checkpoints" / "tiny" / "results.json").read_text())


def _checkpoints(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "checkpoints" / "tiny").glob("ckpt-*.npz"))


@pytest.fixture(scope="module")
def trained(workspace) -> Path:
    """The reference run, uninterrupted."""
    out = workspace["root"] / "reference"
    done = _run(workspace, _train_argv(workspace, out))
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _importers(workspace: dict) -> set[str]:
    """Who asked for tensorflow or tensorflow_text so far, besides Keras's own probe
    (`keras.utils.set_random_seed` seeds TensorFlow too when it can be imported)."""
    attempts = Path(workspace["env"]["PARTF_TEST_IMPORTS"])
    lines = attempts.read_text().splitlines() if attempts.exists() else []
    probe = os.path.join("keras", "src", "utils", "module_utils.py")
    return {line for line in lines if probe not in line}


def test_tensorflow_cannot_be_imported_there(workspace, tmp_path):
    attempts = tmp_path / "imports.txt"
    command = [sys.executable, "-c", "import tensorflow"]
    done = _run(workspace, command, PARTF_TEST_IMPORTS=str(attempts))
    assert done.returncode == 1 and "no tensorflow here" in done.stderr
    assert attempts.read_text() == "tensorflow from <string>:<module>\n"


def test_a_run_trains_validates_and_tests_without_tensorflow(workspace, trained):
    assert not _importers(workspace)
    results = _results(trained)
    assert results["steps"] == STEPS
    for split in ("valid", "test"):
        report = results[split]
        assert report["perplexity"] == pytest.approx(math.exp(report["loss"]), rel=1e-6)
        assert 1 < report["perplexity"] < 120  # below the vocabulary size: it learned
    assert results["expected_weights"]["test"]["perplexity"] > 1  # the search's mixture
    assert results["config"]["training"]["distribution_strategy"] == "default"
    folder = trained / "checkpoints" / "tiny"
    assert _checkpoints(trained)[-1] == f"ckpt-{STEPS:08d}.npz"
    assert (folder / "tiny.keras").is_file() and (folder / "config.json").is_file()
    assert (trained / "plots" / "tiny" / "pi.gif").is_file()


def test_tensorboard_reads_the_logs(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    def read(folder: Path) -> EventAccumulator:
        accumulator = EventAccumulator(str(folder), size_guidance={"tensors": 0})
        accumulator.Reload()
        return accumulator

    train = read(trained / "logs" / "tiny" / "train")
    tags = train.Tags()["tensors"]
    assert {"loss", "perplexity", "lr", "tau", "pi/block_1/identity", "pi"} <= set(tags)
    loss = [(e.step, float(make_ndarray(e.tensor_proto))) for e in train.Tensors("loss")]
    assert [step for step, _ in loss] == list(range(4, STEPS + 1, 4))
    assert all(math.isfinite(value) for _, value in loss)
    tau = [float(make_ndarray(e.tensor_proto)) for e in train.Tensors("tau")]
    assert tau[0] > tau[-1]  # annealed
    assert [e.step for e in train.Tensors("pi")] == [8, 16, 24]
    valid = read(trained / "logs" / "tiny" / "valid")
    results = _results(trained)
    (final,) = valid.Tensors("final_perplexity")
    assert final.step == STEPS
    assert float(make_ndarray(final.tensor_proto)) == pytest.approx(
        results["valid"]["perplexity"], rel=1e-6
    )
    assert [e.step for e in valid.Tensors("perplexity")] == [12, 24]


def test_running_it_again_trains_nothing(workspace, trained):
    before = _results(trained)
    done = _run(workspace, _train_argv(workspace, trained))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed from {trained / 'checkpoints' / 'tiny' / f'ckpt-{STEPS:08d}.npz'}" in (
        done.stderr
    )
    assert f"step 4/{STEPS}" not in done.stderr  # no training step logged
    after = _results(trained)
    assert after["steps"] == STEPS
    assert after["test"]["perplexity"] == pytest.approx(before["test"]["perplexity"], rel=1e-6)


def test_sigterm_then_rerun_ends_as_the_uninterrupted_run(workspace, trained, tmp_path):
    argv = _train_argv(workspace, tmp_path)
    # Each checkpoint write pauses, so the signal lands before training ends.
    process = subprocess.Popen(
        argv,
        env={**workspace["env"], "PARTF_TEST_WRITE_PAUSE": "0.5"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=workspace["root"],
    )
    deadline = time.monotonic() + 240
    while not _checkpoints(tmp_path) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("partf-train: error: stopped by SIGTERM")
    stopped_at = int(_checkpoints(tmp_path)[-1][len("ckpt-") : -len(".npz")])
    assert 0 < stopped_at < STEPS
    assert not (tmp_path / "checkpoints" / "tiny" / "results.json").exists()

    done = _run(workspace, argv)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"at step {stopped_at}" in done.stderr
    resumed, reference = _results(tmp_path), _results(trained)
    assert resumed["steps"] == STEPS
    for split in ("valid", "test"):
        assert resumed[split]["perplexity"] == pytest.approx(
            reference[split]["perplexity"], rel=1e-5
        )
    np.testing.assert_allclose(resumed["pi"], reference["pi"], atol=1e-5)


def test_generate_on_the_trained_model(workspace, trained, capsys):
    """Greedy text from the JAX-trained model, without TensorFlow, is the text TensorFlow
    generates from the same saved model."""
    from partf.cli.generate import run

    argv = ["--model", str(trained / "checkpoints" / "tiny"), "--prompt", "the game was"]
    argv += ["--max_tokens", "8", "--temperature", "0", "--compile", "eager"]
    done = _run(workspace, [sys.executable, "-m", "partf.cli.generate", *argv])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("the game was")
    assert run(argv) == 0  # here, on TensorFlow
    assert done.stdout == capsys.readouterr().out
    assert not _importers(workspace)


def test_a_tensorflow_only_setting_is_one_line(workspace, tmp_path):
    """The spike guard's guarded train step is TensorFlow's: refused before anything is
    written, in one line that names the fix."""
    done = _run(workspace, [*_train_argv(workspace, tmp_path), "--spike_guard=skip"])
    assert done.returncode == 2, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("partf-train: error: --spike_guard=skip needs the TensorFlow backend")
    assert "use --spike_guard=off" in line and "Traceback" not in done.stderr
    assert not (tmp_path / "checkpoints").exists()  # refused before anything is written
