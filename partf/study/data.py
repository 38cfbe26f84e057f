"""A study's data: the records its text arms read (existing folders, or built once from
the plan's text) and the splits of its [mqar] task, each built by `partf-build-data` in
a folder beside the final one and renamed, so an interrupted build starts over rather
than leaving half."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

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


def mqar_folders(paths: StudyPaths) -> dict[str, str]:
    """The splits of the plan's [mqar] task, which the study writes once."""
    base = paths.out / "data" / "mqar" / "mqar"
    return {split: f"{base}_{split}" for split in ("train", "valid", "test")}


def mqar_command(plan: Plan, into: Path) -> list[str]:
    """partf-build-data's command that writes the plan's [mqar] splits into `into`."""
    settings = dict(plan.mqar or {})
    pairs = settings.pop("pairs")
    pairs = pairs if isinstance(pairs, list) else [pairs]
    flag = {
        "eval_pairs": "mqar_eval_pairs",
        "train_examples": "mqar_train_examples",
        "eval_examples": "mqar_eval_examples",
        "seed": "mqar_seed",
    }
    return [
        sys.executable,
        "-m",
        "partf.cli.build_data",
        "--task=mqar",
        f"--tfrecords_directory={into / 'mqar'}",
        f"--mqar_pairs={','.join(str(n) for n in pairs)}",
        *(f"--{flag.get(key, key)}={value}" for key, value in settings.items()),
    ]


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
    leaving half. `final` may hold another build's output already (the MQAR splits beside
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
    splits of its [mqar] task (each once: built aside and renamed)."""
    if plan.mqar is not None:
        final = paths.out / "data" / "mqar"
        if not (final / "mqar_train" / "mqar.json").is_file():
            partial = paths.out / "data" / "mqar.partial"
            command = mqar_command(plan, partial)
            _build_aside(command, final, partial, "the MQAR splits", "the MQAR splits", say)
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
    partial = paths.out / "data.partial"
    text = str(plan.data.text)
    command = build_command(plan, paths, partial)
    _build_aside(command, final, partial, f"records from {text}", text, say)
