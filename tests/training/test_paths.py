"""Where a run writes (`partf.training.paths`): the chief's folders, another worker's
under output_dir/<task>_<id>/, and the output folders made (emptied with --overwrite)
and checked writable before the run starts."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest

from partf.training.config import ConfigError, TrainConfig
from partf.training.paths import RunPaths, prepare_output, run_paths


def strategy(task_type: str | None, task_id: int | None = 0, chief: bool = False):
    """A stand-in for a multi-worker strategy: what `run_paths` reads of it."""
    cluster = {"worker": ["a:1", "b:2"], **({"chief": ["c:3"]} if chief else {})}
    resolver = types.SimpleNamespace(
        task_type=task_type,
        task_id=task_id,
        cluster_spec=lambda: types.SimpleNamespace(as_dict=lambda: cluster),
    )
    return types.SimpleNamespace(cluster_resolver=resolver)


@pytest.mark.parametrize(
    ("given", "folder"),
    [
        (None, ""),
        (strategy(None), ""),
        (strategy("worker", 0), ""),  # no chief: worker 0 is the chief
        (strategy("worker", 1), "worker_1"),
        (strategy("chief", 0, chief=True), ""),
        (strategy("worker", 0, chief=True), "worker_0"),
    ],
    ids=["no-strategy", "no-task", "worker-0", "worker-1", "chief", "worker-0-beside-a-chief"],
)
def test_only_the_chief_writes_to_output_dir(tmp_path, given, folder):
    config = TrainConfig(train_directory="records", output_dir=str(tmp_path), model_name="m")
    assert run_paths(config, given) == RunPaths(tmp_path / folder if folder else tmp_path, "m")


def test_the_output_folders_are_made_and_emptied_with_overwrite(tmp_path):
    paths = RunPaths(tmp_path, "m")
    config = TrainConfig(train_directory="records", output_dir=str(tmp_path), model_name="m")
    prepare_output(paths, config)
    for folder in (paths.logs, paths.checkpoints, paths.plots):
        assert folder.is_dir() and not any(folder.iterdir())
    (paths.checkpoints / "ckpt-00000004.npz").write_bytes(b"")
    prepare_output(paths, config)  # a resume keeps what is there
    assert (paths.checkpoints / "ckpt-00000004.npz").is_file()
    prepare_output(paths, dataclasses.replace(config, overwrite=True))
    assert not any(paths.checkpoints.iterdir())


def test_an_unwritable_output_dir_is_refused_in_one_line(tmp_path):
    (tmp_path / "a_file").write_text("")
    out = tmp_path / "a_file" / "out"
    config = TrainConfig(train_directory="records", output_dir=str(out), model_name="m")
    with pytest.raises(ConfigError) as caught:
        prepare_output(RunPaths(Path(out), "m"), config)
    message = str(caught.value)
    assert message.startswith(f"cannot write under --output_dir {str(out)!r} (")
    assert message.endswith("); choose a writable folder.") and "\n" not in message
