"""A study plan: the TOML file `partf-study` reads (docs/study.md, "The plan", gives every
key), and the runs it names, each an ordinary `partf-train` run.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from partf import tasks
from partf.errors import UsageError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

#: Keys a plan may hold, at the top (and a table per synthetic task, partf.tasks) and in
#: [data] and in an arm's table.
TOP_KEYS = ("description", "seeds", "reference", "flags", "results", "data", "arms")
RECORD_KEYS = ("train", "valid", "test", "sp_model_prefix")
TEXT_KEYS = ("text", "sp_model_prefix", "vocab_size", "batch_size", "seq_len")
ARM_KEYS = (
    "flags",
    "stage2",
    "stage2_flags",
    "init_from",
    "stage2_init",
    "control",
    "matched",
    "task",
)
#: Flags the study sets itself for every run.
OWN_FLAGS = (
    "--output_dir",
    "--model_name",
    "--seed",
    "--from_search",
    "--overwrite",
    "--init_from",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::-([^}]*))?\}")


class PlanError(UsageError):
    """A plan that cannot be run: its one-line message names the key and the fix."""


@dataclasses.dataclass(frozen=True)
class Arm:
    """One named flag set of a plan: its keys as docs/study.md ("The plan") gives them,
    `flags` after the plan's shared ones."""

    name: str
    flags: tuple[str, ...]
    stage2: bool = False
    stage2_flags: tuple[str, ...] = ()
    init_from: str | None = None
    stage2_init: bool = False
    control: bool = False
    matched: str | None = None
    task: str = "text"


@dataclasses.dataclass(frozen=True)
class Run:
    """One partf-train run of a study: `name` (`<arm>-s<seed>`, or `<arm>-stage2-s<seed>`),
    `arm` (its report row, `<arm>` or `<arm>-stage2`), `seed`, `flags` (all but the output
    folder and name), `after` (the search a stage 2 derives from), `init_from` (the run
    whose weights it starts from) and `task` ("text", the plan's [data]; a synthetic
    task's name, such as "mqar"; or "text+mqar", [data] with that task's splits mixed in
    and scored: partf.tasks.plan_task)."""

    name: str
    arm: str
    seed: int
    flags: tuple[str, ...]
    after: str | None = None
    init_from: str | None = None
    task: str = "text"

    @property
    def needs(self) -> tuple[str, ...]:
        """The runs that must finish before this one starts."""
        return tuple(dict.fromkeys(n for n in (self.after, self.init_from) if n is not None))


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """Where the runs' records come from: existing `records` ({"train": folder, ...}), or
    `text` (a folder with train.txt, valid.txt and test.txt, or one file) built with
    `vocab_size`, `batch_size`, `seq_len` and the tokenizer `sp_model_prefix` (None: one
    of `vocab_size` pieces is trained)."""

    records: dict[str, str] | None
    text: str | None = None
    sp_model_prefix: str | None = None
    vocab_size: int = 12000
    batch_size: int = 32
    seq_len: int = 32


@dataclasses.dataclass(frozen=True)
class Plan:
    """A parsed plan; `data` is None for a plan of recall arms alone, and
    `reference` the arm the others are compared with, or None."""

    path: Path
    description: str
    data: DataSpec | None
    flags: tuple[str, ...]
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    reference: str | None
    #: The settings table of each synthetic task arms train on ([mqar], ...), by name.
    tasks: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    results: Path | None = None  # where its report and run records are kept, or None

    def results_folder(self, out: Path | None) -> Path:
        """Where this plan's report and run records (under records/) live: its `results`
        folder (kept in the repository), else the study's folder `out`."""
        if self.results is not None:
            return self.results
        if out is None:
            raise PlanError(
                f"plan {self.path} keeps no results folder of its own (no `results` key); "
                "give --out, the study's folder."
            )
        return out

    def runs(self) -> list[Run]:
        """Every run of the study, seed by seed (a study cut short has every arm at its
        first seeds), each search's stage 2 right after it (its answer is the plan's)."""
        runs = []
        for seed in self.seeds:
            for arm in self.arms:
                search = f"{arm.name}-s{seed}"
                runs.append(
                    Run(
                        search,
                        arm.name,
                        seed,
                        self.flags + arm.flags,
                        init_from=f"{arm.init_from}-s{seed}" if arm.init_from else None,
                        task=arm.task,
                    )
                )
                if arm.stage2:
                    runs.append(
                        Run(
                            f"{arm.name}-stage2-s{seed}",
                            f"{arm.name}-stage2",
                            seed,
                            arm.stage2_flags,
                            after=search,
                            init_from=search if arm.stage2_init else None,
                            task=arm.task,
                        )
                    )
        return runs

    def control_arms(self) -> list[str]:
        """The hand-made arms (`control = true`), whose front the report draws."""
        return [arm.name for arm in self.arms if arm.control]

    def matched_arms(self) -> dict[str, str]:
        """Each arm with a `matched` arm, and that arm: the report's "vs matched"."""
        return {arm.name: arm.matched for arm in self.arms if arm.matched}

    def conversion_arms(self) -> dict[str, str]:
        """The report's rows that start from a trained run (`init_from`), and their stage
        2s, each with the arm it started from: the Pareto plot marks them apart, as they
        trained longer than the rest."""
        found = {}
        for arm in self.arms:
            if arm.init_from:
                found[arm.name] = arm.init_from
                if arm.stage2:
                    found[f"{arm.name}-stage2"] = arm.init_from
        return found

    def arm_names(self) -> list[str]:
        """The report's rows: each arm, and `<arm>-stage2` after a search arm."""
        names = []
        for arm in self.arms:
            names.append(arm.name)
            if arm.stage2:
                names.append(f"{arm.name}-stage2")
        return names


def _fail(path: Path, message: str) -> PlanError:
    return PlanError(f"plan {path}: {message}")


def _expand(path: Path, key: str, value: str) -> str:
    """`value` with $VAR, ${VAR} and ${VAR:-default} replaced from the environment."""

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1) or match.group(2), match.group(3)
        if not os.environ.get(name) and default is not None:
            return default
        if name not in os.environ:
            raise _fail(
                path, f"{key} uses ${name}, which is not set; export {name}=... and run again."
            )
        return os.environ[name]

    return _VARIABLE.sub(replace, value)


def _folder(path: Path, key: str, value: Any) -> str:
    """A path of the plan, expanded and made absolute against the plan's folder."""
    if not isinstance(value, str) or not value:
        raise _fail(path, f"{key} must be a path (a non-empty string).")
    expanded = Path(_expand(path, key, value)).expanduser()
    if not expanded.is_absolute():
        expanded = path.parent / expanded
    return str(expanded.resolve())


def _flags(path: Path, key: str, value: Any) -> tuple[str, ...]:
    """Flags given as one string (split as a shell would) or a list of strings."""
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as e:
            raise _fail(path, f"{key}: cannot split {value!r} ({e}); check its quotes.") from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise _fail(path, f"{key} must be a string of flags or a list of strings.")
    parts = [_expand(path, key, part) for part in parts]
    for part in parts:
        if not part.startswith("--"):
            raise _fail(path, f"{key}: {part!r} is not a --flag; write flags as --name=value.")
        if part.split("=", 1)[0] in OWN_FLAGS:
            raise _fail(
                path,
                f"{key}: {part.split('=', 1)[0]} is set by partf-study for each run; remove it "
                "(seeds go in `seeds`, folders come from --out).",
            )
    return tuple(parts)


def _unknown(path: Path, where: str, table: dict[str, Any], allowed: Sequence[str]) -> None:
    extra = sorted(set(table) - set(allowed))
    if extra:
        raise _fail(path, f"unknown key {extra[0]!r} in {where}; valid keys: {', '.join(allowed)}.")


def _data(path: Path, table: Any) -> DataSpec:
    if not isinstance(table, dict):
        raise _fail(path, "[data] is missing; name records folders (train, valid, test) or text.")
    # [data]'s `text` key names a folder of text, not the task.
    of_text = "text" in table
    _unknown(
        path,
        f"[data] ({'text' if of_text else 'records'})",
        table,
        TEXT_KEYS if of_text else RECORD_KEYS,
    )
    prefix = table.get("sp_model_prefix")
    prefix = _folder(path, "[data] sp_model_prefix", prefix) if prefix else None
    if of_text:
        numbers = {}
        for key in ("vocab_size", "batch_size", "seq_len"):
            value = table.get(key, DataSpec.__dataclass_fields__[key].default)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise _fail(path, f"[data] {key} must be a positive integer, not {value!r}.")
            numbers[key] = value
        return DataSpec(None, _folder(path, "[data] text", table["text"]), prefix, **numbers)
    if "train" not in table:
        raise _fail(path, "[data] needs `train` (a records folder) or `text` (a text folder).")
    records = {
        split: _folder(path, f"[data] {split}", table[split])
        for split in ("train", "valid", "test")
        if split in table
    }
    return DataSpec(records, sp_model_prefix=prefix)


def _arm(path: Path, name: str, value: Any) -> Arm:
    if not _NAME.match(name) or "-stage2" in name:
        raise _fail(
            path, f"arm name {name!r}: use letters, digits, '_' and '.' (it names folders)."
        )
    if isinstance(value, dict):
        _unknown(path, f"[arms.{name}]", value, ARM_KEYS)
        for key in ("stage2", "stage2_init", "control"):
            if not isinstance(value.get(key, False), bool):
                raise _fail(path, f"arms.{name}.{key} must be true or false.")
        stage2, stage2_init = value.get("stage2", False), value.get("stage2_init", False)
        if stage2_init and not stage2:
            raise _fail(path, f"arms.{name}.stage2_init needs stage2 = true.")
        for key in ("init_from", "matched"):
            if not isinstance(value.get(key, ""), str):
                raise _fail(path, f"arms.{name}.{key} must name an arm of the plan.")
        task = value.get("task", tasks.records_task().name)
        try:
            tasks.plan_task(task)
        except UsageError as e:
            raise _fail(path, f"arms.{name}.{e}.") from None
        return Arm(
            name,
            _flags(path, f"arms.{name}.flags", value.get("flags", "")),
            stage2,
            _flags(path, f"arms.{name}.stage2_flags", value.get("stage2_flags", "")),
            value.get("init_from"),
            stage2_init,
            value.get("control", False),
            value.get("matched"),
            task,
        )
    return Arm(name, _flags(path, f"arms.{name}", value))


def _task_table(path: Path, task: Any, table: Any) -> dict[str, Any]:
    """A synthetic task's settings table, checked (partf-build-data writes its splits)."""
    where = f"[{task.name}]"
    if not isinstance(table, dict):
        raise _fail(path, f"{where} must be a table of settings ({', '.join(task.required)}, ...).")
    _unknown(path, where, table, [field.name for field in dataclasses.fields(task.options)])
    for key in task.required:
        if key not in table:
            raise _fail(path, f"{where} needs {key}.")
    try:
        task.settings_of(table)
    except UsageError as e:
        raise _fail(path, f"{where} {e}.") from None
    return dict(table)


def load_plan(path: str | Path) -> Plan:
    """Reads and checks a plan file; PlanError for a missing or unreadable file, bad TOML,
    an unknown key or a bad value."""
    path = Path(path).resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError(f"plan {path} does not exist; give a TOML file (see studies/).") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(f"cannot read plan {path} ({e}).") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _fail(path, f"not valid TOML ({e}).") from None
    _unknown(path, "the plan", table, (*TOP_KEYS, *tasks.drawn_tasks()))
    arms_table = table.get("arms")
    if not isinstance(arms_table, dict) or not arms_table:
        raise _fail(path, "[arms] is missing or empty; name at least one arm.")
    arms = tuple(_arm(path, name, value) for name, value in arms_table.items())
    seeds = table.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise _fail(path, f"seeds must be a list of distinct non-negative integers, not {seeds!r}.")
    by_name = {arm.name: arm for arm in arms}
    for arm in arms:
        source = by_name.get(arm.init_from) if arm.init_from else None
        if arm.init_from is not None and (source is None or source is arm):
            raise _fail(
                path,
                f"arms.{arm.name}.init_from {arm.init_from!r} is not another arm; name the "
                f"arm whose trained runs it starts from, one of {list(by_name)}.",
            )
        if source is not None and source.init_from is not None:
            raise _fail(
                path,
                f"arms.{arm.name}.init_from names {source.name}, which itself starts from "
                f"{source.init_from}; start from an arm trained from scratch.",
            )
        if arm.matched is not None and (arm.matched not in by_name or arm.matched == arm.name):
            raise _fail(
                path,
                f"arms.{arm.name}.matched {arm.matched!r} is not another arm; name the arm "
                f"trained as long as it with nothing removed, one of {list(by_name)}.",
            )
    drawn = tasks.drawn_tasks()
    tables = {name: _task_table(path, drawn[name], table[name]) for name in drawn if name in table}
    text_arms = False
    for arm in arms:
        trained, mixed = tasks.plan_task(arm.task)
        text_arms = text_arms or not trained.drawn
        needed = mixed or trained
        if needed.drawn and needed.name not in tables:
            raise _fail(
                path,
                f"arm {arm.name} has task = '{arm.task}' but the plan has no "
                f"[{needed.name}] table.",
            )
    data = _data(path, table.get("data")) if text_arms or "data" in table else None
    for arm in arms:
        mixed = tasks.plan_task(arm.task)[1]
        if mixed is None or data is None or data.text is None:
            continue
        rows = tables[mixed.name]
        shape, text_shape = (rows["batch_size"], rows["seq_len"]), (data.batch_size, data.seq_len)
        if shape != text_shape:
            where = f"[{mixed.name}]"
            raise _fail(
                path,
                f"arm {arm.name} mixes {where} batches of {shape[0]}x{shape[1]} into [data] "
                f"batches of {text_shape[0]}x{text_shape[1]}; give {where} the batch_size "
                "and seq_len of [data].",
            )
    reference = table.get("reference")
    if reference is not None and reference not in arms_table:
        raise _fail(
            path, f"reference {reference!r} is not an arm; choose one of {list(arms_table)}."
        )
    return Plan(
        path=path,
        description=str(table.get("description", "")),
        data=data,
        flags=_flags(path, "flags", table.get("flags", "")),
        arms=arms,
        seeds=tuple(seeds),
        reference=reference,
        tasks=tables,
        results=Path(_folder(path, "results", table["results"])) if "results" in table else None,
    )
