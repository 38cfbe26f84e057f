"""Checkpoints: round trip, pruning, no unloadable latest checkpoint after a crash, and
which saved settings a resume may not change."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from partf import atomic
from partf.errors import DataError
from partf.models.config import ModelConfig
from partf.run_folder import CheckpointFormatError, RunFolder, read_checkpoint
from partf.serialization import FORMAT_VERSION, FormatError
from partf.training.checkpoint import (
    CheckpointError,
    CheckpointManager,
    config_differences,
    restore,
    restore_variables,
    saved_paths,
)
from partf.training.config import TrainConfig
from tests.training.helpers import TINY
from tests.training.helpers import TRAIN_VOCAB as VOCAB


def _variables():
    return [
        keras.Variable(np.arange(6, dtype="float32").reshape(2, 3), name="w"),
        keras.Variable(np.int64(7), name="step", trainable=False),
    ]


def test_round_trip_restores_values_and_meta(tmp_path):
    manager = CheckpointManager(tmp_path, keep=5)
    variables = _variables()
    path = manager.save(12, {"model": variables}, meta={"epoch": 1, "config": {"a": [1, 2]}})
    assert path.name == "ckpt-00000012.npz"
    fresh = [
        keras.Variable(np.zeros((2, 3), "float32"), name="w"),
        keras.Variable(np.int64(0), name="step", trainable=False),
    ]
    groups, meta, latest = RunFolder(tmp_path).newest_checkpoint()
    assert latest == path
    assert meta["step"] == 12 and meta["epoch"] == 1 and meta["config"] == {"a": [1, 2]}
    restore_variables(fresh, groups["model"], "model", saved_paths(meta, "model"))
    np.testing.assert_array_equal(fresh[0].numpy(), variables[0].numpy())
    assert fresh[1].numpy() == 7


def test_keeps_only_the_newest(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    for step in (1, 2, 3, 4):
        manager.save(step, {"model": _variables()}, meta={})
    assert [step for step, _ in RunFolder(tmp_path).checkpoints()] == [3, 4]


def test_crash_before_the_rename_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path, keep=5)
    manager.save(1, {"model": _variables()}, meta={"n": 1})

    def killed(src, dst):
        raise KeyboardInterrupt  # the process dies between writing and renaming

    monkeypatch.setattr(atomic.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        manager.save(2, {"model": _variables()}, meta={"n": 2})
    monkeypatch.undo()
    # A half-written temporary file, as a SIGKILL mid-write would leave one.
    (tmp_path / ".tmp-999999-ckpt-00000003.npz").write_bytes(b"PK\x03\x04 partial")
    groups, meta, path = RunFolder(tmp_path).newest_checkpoint()
    assert meta["n"] == 1 and path.name == "ckpt-00000001.npz"
    manager.save(4, {"model": _variables()}, meta={"n": 4})
    assert not list(tmp_path.glob(".tmp-*")), "stale temporary files are cleaned up"


def test_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path):
    manager = CheckpointManager(tmp_path, keep=5)
    manager.save(1, {"model": _variables()}, meta={"n": 1})
    newest = manager.save(2, {"model": _variables()}, meta={"n": 2})
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])  # truncated on disk
    with pytest.raises(CheckpointError, match="unreadable"):
        read_checkpoint(newest)
    _, meta, path = RunFolder(tmp_path).newest_checkpoint()
    assert meta["n"] == 1


def _rewrite_format(path, found):
    """Rewrites checkpoint `path`'s record as another format would have it (None: none)."""
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    meta = json.loads(bytes(arrays["meta"]).decode("utf-8"))
    meta.pop("format")
    if found is not None:
        meta["format"] = found
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    np.savez(path, **arrays)


@pytest.mark.parametrize(
    ("found", "said"),
    [
        (None, "an earlier partf (format none;"),
        (
            FORMAT_VERSION - 1,
            f"an earlier partf (format {FORMAT_VERSION - 1}; "
            f"this partf reads format {FORMAT_VERSION})",
        ),
        (FORMAT_VERSION + 1, f"a newer partf (format {FORMAT_VERSION + 1};"),
    ],
    ids=["none", "earlier", "newer"],
)
def test_a_checkpoint_of_another_format_is_refused_in_one_line_not_skipped(tmp_path, found, said):
    """Each record holds the format; one of another format is not damage (no fall back to
    an older checkpoint): it is refused, saying which format and what to do."""
    manager = CheckpointManager(tmp_path, keep=5)
    manager.save(1, {"model": _variables()}, meta={"n": 1})
    newest = manager.save(2, {"model": _variables()}, meta={"n": 2})
    assert read_checkpoint(newest)[1]["format"] == FORMAT_VERSION
    _rewrite_format(newest, found)
    with pytest.raises(CheckpointFormatError) as caught:
        RunFolder(tmp_path).newest_checkpoint()
    message = str(caught.value)
    assert isinstance(caught.value, DataError)  # the commands' one-line failure, status 1
    assert "\n" not in message
    assert message.startswith(f"checkpoint {newest} was written by {said}")
    assert f"this partf reads format {FORMAT_VERSION}" in message
    if found is None:
        assert "retrain it, or load it with the partf version that wrote it" in message


def test_restore_refuses_another_configuration(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"model": _variables()}, meta={})
    groups, meta, _ = RunFolder(tmp_path).newest_checkpoint()
    paths = saved_paths(meta, "model")
    wider = [
        keras.Variable(np.zeros((2, 4), "float32"), name="w"),
        keras.Variable(np.int64(0), name="step"),
    ]
    with pytest.raises(CheckpointError, match=r"shape \(2, 4\) but the checkpoint holds \(2, 3\)"):
        restore_variables(wider, groups["model"], "model", paths)
    with pytest.raises(CheckpointError, match="not in this run: step"):
        restore_variables(wider[:1], groups["model"], "model", paths)


@pytest.mark.parametrize(
    ("part", "dropped", "said"),
    [
        ("model", "search_cost", '"search_cost": "flops"'),
        ("training", "spike_factor", '"spike_factor": '),
    ],
)
def test_a_checkpoint_lacking_a_setting_is_refused_not_defaulted(tmp_path, part, dropped, said):
    """Within one format a setting missing from a checkpoint is not taken as today's
    default: the resume is refused in one line naming the file, the setting and the fix
    (before the run's model is looked at: `built` is never read)."""
    model = ModelConfig(vocab_size=VOCAB, batch_size=8, tau_steps=24, **TINY).to_dict()
    saved = {"model": model, "training": TrainConfig().training_dict()}
    del saved[part][dropped]
    path = CheckpointManager(tmp_path).save(3, {"model": _variables()}, {"config": saved})
    with pytest.raises(FormatError) as caught:
        restore(tmp_path, built=None, batches_per_epoch=1)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"checkpoint {path} ({part} settings) lacks {dropped}, which ")
    assert said in message and "add them to it with the values its run used" in message
    assert config_differences(saved, saved) == []


def test_a_renamed_or_moved_run_resumes_but_a_changed_setting_does_not():
    model = ModelConfig(vocab_size=VOCAB, batch_size=8, tau_steps=24, **TINY).to_dict()
    saved = {"model": model, "training": TrainConfig(model_name="probs").to_dict()}
    moved = TrainConfig(model_name="probs_seed0", output_dir="/elsewhere").to_dict()
    assert config_differences(saved, {"model": model, "training": moved}) == []
    changed = TrainConfig(model_name="probs_seed0", max_lr=2e-4).to_dict()
    assert config_differences(saved, {"model": model, "training": changed}) == [
        "max_lr: 0.0001 -> 0.0002"
    ]
