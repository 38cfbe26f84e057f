"""Files written by an earlier release still load, evaluate the same and resume the same run.

The fixtures in tests/fixtures/legacy/ were written by partf at commit fab03a8 (see
make_fixtures.py there, which must not be rerun by later code): `.keras` models with
carried XL memory and optimizer state, and partf-train checkpoints taken half-way through
three runs (a fixed causal model, a causal PAR search, an mlm encoder) with the
uninterrupted runs' final checkpoints and results.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest

import partf  # noqa: F401  (registers partf's classes for load_model)
from partf.cli.train import main
from partf.training.checkpoint import CheckpointManager, matched_arrays
from tests.fixtures.legacy import make_fixtures as legacy

FIXTURES = Path(legacy.__file__).resolve().parent


def _fixture(*parts: str) -> Path:
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"legacy fixture {path} is absent")
    return path


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-6, err_msg=key)


def _renamed_slots(want: dict[str, np.ndarray], model: keras.Model) -> dict[str, np.ndarray]:
    """`want` with its optimizer slots under today's names. A slot is named after its
    model variable's path, and paths moved (issue 38: the encoder's blocks under its
    backbone): the saved names go through the checkpoints' `PATH_ALIASES`."""
    names = [key for key in want if key.startswith("optimizer/")]
    if not names:
        return want
    pairs = matched_arrays(
        model.optimizer.variables, [want[k] for k in names], "optimizer", names, root=model.name
    )
    out = {key: value for key, value in want.items() if key not in names}
    out.update({"optimizer/" + v.path.split("/", 1)[-1]: value for v, value in pairs})
    return out


# ----------------------------------------------------------------- .keras files
@pytest.mark.parametrize(
    "name, expected",
    [
        ("fixed", legacy.expected_causal),
        ("search", legacy.expected_causal),
        ("encoder", legacy.expected_encoder),
        ("encoder_search", legacy.expected_encoder),
        ("mlm", legacy.expected_mlm),
    ],
)
def test_a_legacy_keras_file_evaluates_the_same(name, expected):
    """Outputs, pi, the carried memory before and after two evaluation calls, and the
    optimizer state: as fab03a8 computed them at save time."""
    path = _fixture("keras", f"{name}.keras")
    with np.load(_fixture("keras", f"{name}.npz")) as data:
        want = dict(data)
    model = keras.saving.load_model(path, compile=name != "mlm")
    _assert_same(expected(model), _renamed_slots(want, model))


# ------------------------------------------------------------ training checkpoints
@pytest.mark.parametrize("name", sorted(legacy.RUNS))
def test_a_legacy_checkpoint_resumes_the_same_run(name, tmp_path):
    """The step-4 checkpoint, resumed by today's partf-train, ends where the uninterrupted
    run of fab03a8 ended: the same loss and the same final model and optimizer."""
    resume = _fixture("runs", name, "resume", "ckpt-00000004.npz")
    final = _fixture("runs", name, "final")
    folder = tmp_path / "checkpoints" / "run"
    folder.mkdir(parents=True)
    shutil.copy(resume, folder)
    assert main(legacy.run_argv(name, _fixture("records"), tmp_path)) == 0

    results = json.loads((folder / "results.json").read_text())
    want = json.loads((final / "results.json").read_text())
    assert results["steps"] == want["steps"] == legacy.STEPS
    assert results["train"]["loss"] == pytest.approx(want["train"]["loss"], rel=1e-6)
    if "pi" in want:
        np.testing.assert_allclose(results["pi"], want["pi"], rtol=1e-6, atol=1e-6)
    got_groups, _ = CheckpointManager.load(folder / f"ckpt-{legacy.STEPS:08d}.npz")
    want_groups, _ = CheckpointManager.load(final / f"ckpt-{legacy.STEPS:08d}.npz")
    for group in ("model", "optimizer"):
        assert len(got_groups[group]) == len(want_groups[group])
        for got, wanted in zip(got_groups[group], want_groups[group], strict=True):
            np.testing.assert_allclose(got, wanted, rtol=1e-5, atol=1e-6)


def test_partf_generate_rebuilds_a_legacy_checkpoint_under_another_model_name(tmp_path):
    """partf-generate names the model after the run folder ("mine", not the saved
    "par_transformer_xl"); the checkpoint's arrays still land in their own variables."""
    from partf.cli.loading import load_model

    final = _fixture("runs", "fixed", "final")
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(final / f"ckpt-{legacy.STEPS:08d}.npz", folder)
    model, _ = load_model(folder)
    assert model.name == "mine"
    groups, meta = CheckpointManager.load(folder / f"ckpt-{legacy.STEPS:08d}.npz")
    saved = dict(zip((p for p, _ in meta["layout"]["model"]), groups["model"], strict=True))
    for variable in model.variables:
        if "seed_generator" not in variable.path:
            # Issue 38 moved the embedding and blocks under the model's backbone.
            path = variable.path.replace("mine/backbone/", "mine/", 1)
            want = saved[path.replace("mine/", "par_transformer_xl/", 1)]
            np.testing.assert_array_equal(variable.numpy(), want, err_msg=variable.path)
