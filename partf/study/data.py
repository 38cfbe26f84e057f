"""A study's data: the records its text arms read (existing folders, or built once from
the plan's text) and the splits of each synthetic task it names ([mqar], ...), each
built by `partf-build-data` in a folder beside the final one and renamed, so an
interrupted build starts over rather than leaving half."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from partf import tasks
from partf.study.paths import StudyPaths
from partf.study.plan import Plan, PlanError


def records_of(plan: Plan, paths: StudyPaths) -> dict[str, str]:
    """The records folders every run reads: the plan's, or those built from its text."""
    if plan.data.records is not None:
        return dict(plan.data.records)
    base = paths.out / "data" / "records"
    return {split: f"{base}_{split}" for split in ("train", "valid", "test")}


def tokenizer_of(plan: Plan, paths: StudyPaths) -> str | None:
    """The tokenizer the runs name (checked against the records' metadata)."""
    if plan.data.sp_model_prefix:
        return plan.data.sp_model_prefix
    if plan.data.text is not None:
        return str(paths.out / "data" / "tokenizer" / "spm")
    return None


def build_command(plan: Plan, paths: StudyPaths, into: Path) -> list[str]:
    """partf-build-data's command that builds the plan's text into `into`."""
    data = plan.data
    if Path(data.text).is_dir():
        source = [f"--text_file={data.text}", "--from_directory"]
    else:  # one file, split by lines: 90% train, 5% valid, 5% test
        source = [f"--source={data.text}", f"--text_file={into / 'text'}"]
    command = [
        sys.executable,
        "-m",
        "partf.cli.build_data",
        *source,
        f"--tfrecords_directory={into / 'records'}",
        f"--batch_size={data.batch_size}",
        f"--seq_len={data.seq_len}",
    ]
    if data.sp_model_prefix:
        command.append(f"--sp_model_prefix={data.sp_model_prefix}")
    else:
        command += [
            "--train_tokenizer",
            f"--vocab_size={data.vocab_size}",
            f"--sp_model_prefix={into / 'tokenizer' / 'spm'}",
        ]
    return command


def task_folders(paths: StudyPaths, name: str) -> dict[str, str]:
    """The splits of the plan's task `name` ([mqar], ...), which the study writes once."""
    base = paths.out / "data" / name / name
    return {split: f"{base}_{split}" for split in ("train", "valid", "test")}


def task_command(plan: Plan, name: str, into: Path) -> list[str]:
    """partf-build-data's command that writes the splits of the plan's task `name` into
    `into`."""
    argv = tasks.drawn_tasks()[name].build_argv(plan.tasks[name])
    return [sys.executable, "-m", "partf.cli.build_data", *argv,
            f"--tfrecords_directory={into / name}"]  # fmt: skip


def _build_aside(
    command: list[str],
    final: Path,
    partial: Path,
    what: str,
    source: str,
    say: Callable[[str], None],
) -> None:
    """Runs a partf-build-data `command` (building `what` from `source`) into `partial`,
    then moves what it wrote into `final`, so an interrupted build starts over rather than
    leaving half. `final` may hold another build's output already (a task's splits beside
    the records): only the names this build wrote are replaced."""
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    say(f"building {what} into {final}")
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise PlanError(
            f"partf-build-data failed (status {done.returncode}) on {source}; see its "
            "message above."
        )
    final.mkdir(parents=True, exist_ok=True)
    for item in partial.iterdir():
        if (final / item.name).exists():  # left by a build that was cut short
            shutil.rmtree(final / item.name)
        item.replace(final / item.name)
    partial.rmdir()


def prepare_data(plan: Plan, paths: StudyPaths, say: Callable[[str], None]) -> None:
    """Checks the records exist, or builds them from the plan's text, and writes the
    splits of each task it names (each once: built aside and renamed)."""
    for name in plan.tasks:
        final = paths.out / "data" / name
        if not tasks.get(name).owns(task_folders(paths, name)["train"]):
            partial = paths.out / "data" / f"{name}.partial"
            what = f"the {name} splits"
            _build_aside(task_command(plan, name, partial), final, partial, what, what, say)
    if plan.data is None:
        return
    if plan.data.records is not None:
        for split, folder in plan.data.records.items():
            if not Path(folder).is_dir():
                raise PlanError(
                    f"plan {plan.path}: [data] {split} {folder} does not exist; build the "
                    "records (partf-build-data) or fix the path."
                )
        return
    if not Path(plan.data.text).exists():
        raise PlanError(
            f"plan {plan.path}: [data] text {plan.data.text} does not exist; give a folder "
            "with train.txt, valid.txt and test.txt, or one text file."
        )
    final = paths.out / "data"
    if (final / "records_train" / "metadata.json").is_file():
        return
    partial, text = paths.out / "data.partial", str(plan.data.text)
    command = build_command(plan, paths, partial)
    _build_aside(command, final, partial, f"records from {text}", text, say)
