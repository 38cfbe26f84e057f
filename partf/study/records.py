"""Run records: what a finished run of a study showed, in a few kilobytes.

A run folder (checkpoints, TensorBoard, what the process printed) is scratch: it stays on
the machine that trained it. A record is the result: one JSON file per finished run and
machine, in the plan's records folder (`records = "..."` in the plan, kept in the
repository; else `<out>/records/`), under a folder named after the machine
(`machine_folder`), and the study's report is built from the records alone
(`partf-study PLAN --report`), so a lost machine loses time, not evidence. A run trained
again on another machine (a conversion's source whose weights were lost with the first)
keeps both records: the same run on two CPUs can end in different places
(docs/recall.md), so a result of one machine never stands in for another's.

A seed is one machine (`seed_machines`): a table of one commit and backend takes all the
runs of a seed from the machine that recorded most of them, because a conversion starts
from the model its own machine trained; a table's seeds may come from different machines,
and its heading names each. Records of a seed on any other machine make that machine's
own table.

A record holds the run's name, arm and seed; where it ran (partf's git commit, the Keras
backend, the machine: CPU model and cores, or the GPU); the library versions; its
results.json (scores, architecture, FLOPs, its resolved configuration under "config");
the step from which a search stayed decided and the median training steps per second,
both read from its TensorBoard log; a search's measured cost table; and its side-by-side
timing (benchmarks/study_speed.py's speed.json) where one was measured.

Records are results, not files that build a model: their schema has a version of its
own (`RECORD_VERSION`), independent of the model format (partf.serialization), and every
later partf reads every record version it ever wrote.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from partf.atomic import atomic_write_text
from partf.errors import UsageError
from partf.study.paths import StudyPaths
from partf.study.plan import Plan

#: The key every record carries, with its schema version as the value.
RECORD_KEY = "partf_record"
#: The schema version this partf writes. Versions it reads: 1 to this one.
RECORD_VERSION = 1
#: Where benchmarks/study_speed.py writes the side-by-side speed of the final models.
SPEED_FILE = "speed.json"
#: Fields every record of every version has.
REQUIRED = ("run", "arm", "seed", "commit", "backend", "machine", "results")

#: A search has decided from the first logged step at which every block's largest pi is
#: at least this, each block's argmax staying what it ends as from then on.
DECIDED = 0.9


class RecordError(UsageError):
    """A record that cannot be read: its one-line message names the file and the fix."""


# ------------------------------------------------------------------ reading TensorBoard
def event_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard folder: tag -> [(step, value)], in step order.
    Empty when the folder or tensorboard itself is missing."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError:
        return {}
    if not logdir.is_dir():
        return {}
    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    found: dict[str, list[tuple[int, float]]] = {}
    tags = events.Tags()
    for tag in tags.get("scalars", []):
        found[tag] = [(e.step, float(e.value)) for e in events.Scalars(tag)]
    for tag in tags.get("tensors", []):
        values = [(e.step, make_ndarray(e.tensor_proto)) for e in events.Tensors(tag)]
        found[tag] = [(step, float(v)) for step, v in values if getattr(v, "size", 0) == 1]
    return {tag: sorted(values) for tag, values in found.items()}


def decided_step(scalars: dict[str, list[tuple[int, float]]]) -> int | None:
    """The step from which a search's pi stayed decided (see `DECIDED`), from its logged
    pi/block_<i>/<candidate> scalars; None when it never decided or logged no pi."""
    blocks: dict[int, dict[str, dict[int, float]]] = {}
    for tag, values in scalars.items():
        parts = tag.split("/")
        if len(parts) == 3 and parts[0] == "pi" and parts[1].startswith("block_"):
            blocks.setdefault(int(parts[1][6:]), {})[parts[2]] = dict(values)
    if not blocks or all(len(c) < 2 for c in blocks.values()):
        return None
    steps = sorted(set.intersection(*(set(s) for c in blocks.values() for s in c.values())))
    if not steps:
        return None

    def argmax_and_top(step: int) -> list[tuple[str, float]]:
        rows = []
        for block in sorted(blocks):
            name, top = max(((n, v[step]) for n, v in blocks[block].items()), key=lambda t: t[1])
            rows.append((name, top))
        return rows

    final = [name for name, _ in argmax_and_top(steps[-1])]
    since = None
    for step in steps:
        rows = argmax_and_top(step)
        held = [name for name, _ in rows] == final and all(top >= DECIDED for _, top in rows)
        since = (since or step) if held else None
    return since


# ------------------------------------------------------------------ building
def _one(values: list[str]) -> str:
    """The one value of a run's launches, or "mixed: a + b" when they differ."""
    distinct = list(dict.fromkeys(values))
    if not distinct:
        return "unknown"
    return distinct[0] if len(distinct) == 1 else "mixed: " + " + ".join(distinct)


def build_record(
    name: str,
    arm: str,
    seed: int,
    results: Mapping[str, Any],
    study: Mapping[str, Any],
    logdir: Path | None = None,
    cost_table: Mapping[str, Any] | None = None,
    speed: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A run's record from what its folder holds: `results` (results.json), `study`
    (study.json: its command and launches), its TensorBoard training folder `logdir`,
    a search's `cost_table` and its side-by-side `speed`."""
    launches = list(study.get("launches", []))
    scalars = event_scalars(logdir) if logdir is not None else {}
    steps_per_second = None
    tokens = [v for _, v in scalars.get("tokens_per_second", [])]
    shape = results.get("data") or {}
    if tokens and shape.get("batch_size") and shape.get("seq_len"):
        steps_per_second = statistics.median(tokens) / (shape["batch_size"] * shape["seq_len"])
    versions = next((dict(x["versions"]) for x in reversed(launches) if x.get("versions")), {})
    return {
        RECORD_KEY: RECORD_VERSION,
        "run": name,
        "arm": arm,
        "seed": seed,
        "commit": _one([str(launch.get("code", "unknown")) for launch in launches]),
        "backend": _one([str(launch.get("backend", "unknown")) for launch in launches]),
        "machine": _one([str(launch.get("machine", "unknown")) for launch in launches]),
        "versions": versions,
        "command": list(study.get("command", [])),
        "launches": len(launches),
        "results": dict(results),
        "decided_step": decided_step(scalars) if results.get("search") else None,
        "steps_per_second": steps_per_second,
        "cost_table": dict(cost_table) if cost_table else None,
        "speed": dict(speed) if speed else None,
    }


# ------------------------------------------------------------------ files
def write_text(path: Path, text: str) -> None:
    """Writes `text` so that a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def write_json(path: Path, value: Any) -> None:
    """Writes `value` as indented JSON with sorted keys (`write_text`)."""
    write_text(path, json.dumps(value, indent=1, sort_keys=True) + "\n")


def write_changed(path: Path, record: Mapping[str, Any]) -> bool:
    """Writes `record` at `path` (`write_json`) unless the file already holds the same
    record; returns whether it wrote."""
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")) == json.loads(json.dumps(record)):
            return False
    write_json(path, record)
    return True


def machine_folder(machine: str) -> str:
    """The folder of a records folder holding one machine's records: the machine's name in
    lower case, each run of other characters a hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-") or "unknown"


def record_path(folder: Path, name: str, machine: str) -> Path:
    """Where the record of run `name` trained on `machine` lives in a records folder."""
    return folder / machine_folder(machine) / f"{name}.json"


def read_record(path: Path) -> dict[str, Any]:
    """A record, checked: RecordError (one line naming the file) when it is not JSON, is
    cut short, lacks a field, or was written by a newer partf."""
    fix = f"restore it with `git checkout -- {path}`, or delete it and run the study again"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RecordError(f"cannot read run record {path} ({e}); {fix}.") from None
    try:
        record = json.loads(text)
    except ValueError as e:
        raise RecordError(
            f"run record {path} is not valid JSON (truncated or corrupt: {e}); {fix}."
        ) from None
    version = record.get(RECORD_KEY) if isinstance(record, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"{path} is not a partf run record (no {RECORD_KEY!r} key); {fix}.")
    if version > RECORD_VERSION:
        raise RecordError(
            f"run record {path} has record version {version}, newer than this partf reads "
            f"({RECORD_VERSION}); update partf."
        )
    missing = [key for key in REQUIRED if key not in record]
    if missing or not isinstance(record.get("results"), dict):
        raise RecordError(
            f"run record {path} lacks {missing[0] if missing else 'results'!r}; {fix}."
        )
    return record


def read_records(folder: Path) -> list[dict[str, Any]]:
    """Every record of a records folder, in the order of their paths (empty when it does
    not exist): one folder per machine, and the flat layout of earlier partf."""
    if not folder.is_dir():
        return []
    paths = sorted(folder.glob("*.json")) + sorted(folder.glob("*/*.json"))
    return [read_record(path) for path in paths]


def recorded_on(records: Sequence[Mapping[str, Any]], machine: str) -> set[str]:
    """The names of the runs with a record of `machine`."""
    return {record["run"] for record in records if record["machine"] == machine}


def _runs_by_seed(plan: Plan) -> dict[int, set[str]]:
    """The names of the plan's runs, by seed."""
    found: dict[int, set[str]] = {}
    for run in plan.runs():
        found.setdefault(run.seed, set()).add(run.name)
    return found


def seeds_done(records: Sequence[Mapping[str, Any]], plan: Plan) -> set[int]:
    """The seeds of `plan` that one machine has recorded whole."""
    held: dict[tuple[int, str], set[str]] = {}
    for record in records:
        held.setdefault((record["seed"], record["machine"]), set()).add(record["run"])
    runs = _runs_by_seed(plan)
    return {seed for (seed, _), names in held.items() if seed in runs and runs[seed] <= names}


def open_seeds(plan: Plan, out: Path | None = None) -> list[int]:
    """The seeds of `plan` that no machine has recorded whole, from its records folder
    (its results folder, else `out`'s records/): the seeds a study still has to train."""
    done = seeds_done(read_records(plan.results_folder(out) / "records"), plan)
    return [seed for seed in plan.seeds if seed not in done]


def finished_runs(records: Sequence[Mapping[str, Any]], plan: Plan, machine: str) -> set[str]:
    """The runs of `plan` a study on `machine` counts as finished: those it recorded
    itself, and every run of a seed that one machine recorded whole. A seed another
    machine left unfinished is trained again here from its first run, so that its runs
    all come from one machine (`seed_machines`)."""
    runs = _runs_by_seed(plan)
    done = recorded_on(records, machine)
    for seed in seeds_done(records, plan):
        done |= runs[seed]
    return done


def file_records(source: Path, folder: Path) -> list[Path]:
    """Copies every record of `source` (a study's records folder, any layout) into the
    records folder `folder`, each in its machine's folder, where it is missing or differs;
    returns the paths written. A record of another machine is never overwritten."""
    written = []
    for record in read_records(source):
        path = record_path(folder, record["run"], record["machine"])
        if write_changed(path, record):
            written.append(path)
    return written


def sync_records(plan: Plan, paths: StudyPaths, folder: Path) -> list[str]:
    """Writes the record of every finished run of `plan` under `paths` into `folder`
    where it is missing or differs (a side-by-side timing measured since, say); returns
    the names written. Runs without a folder here keep the record they have."""
    speed: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        speed = json.loads((paths.out / SPEED_FILE).read_text()).get("runs") or {}
    written = []
    for run in plan.runs():
        run_folder = paths.run(run.name)
        try:
            results = json.loads(run_folder.results_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not finished here
        study: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            study = json.loads(paths.record(run.name).read_text(encoding="utf-8"))
        cost_table = None
        with contextlib.suppress(OSError, ValueError):
            cost_table = json.loads(run_folder.cost_table_path.read_text())
        record = build_record(
            run.name,
            run.arm,
            run.seed,
            results,
            study,
            paths.run_dir(run.name) / "logs" / run.name / "train",
            cost_table,
            speed.get(run.name),
        )
        if write_changed(record_path(folder, run.name, record["machine"]), record):
            written.append(run.name)
    return written


def _commit(record: Mapping[str, Any]) -> str:
    commit = str(record.get("commit", "unknown"))
    short = commit if commit.startswith(("mixed", "partf ", "unknown")) else commit[:7]
    if commit.endswith("+changes") and not commit.startswith("mixed"):
        short += "+changes"
    return short


def where(record: Mapping[str, Any]) -> str:
    """Where a record's run ran: its backend and machine at its commit."""
    return f"{record['backend']} on {record['machine']}, commit {_commit(record)}"


def seed_machines(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, int], str]:
    """The machine each seed takes its runs from, by (backend, commit, seed): the machine
    holding the most of that seed's records (on a tie, the first by name). A conversion
    starts from the weights its own machine trained, and the same run can end elsewhere on
    another CPU, so a seed's runs in a table never mix machines."""
    counts = Counter((r["backend"], _commit(r), r["seed"], r["machine"]) for r in records)
    chosen: dict[tuple[str, str, int], str] = {}
    for (backend, commit, seed, machine), _ in sorted(
        counts.items(), key=lambda item: (-item[1], item[0][3])
    ):
        chosen.setdefault((backend, commit, seed), machine)
    return chosen


def tables(records: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The records split into tables, each under its heading. A table never mixes commits
    or backends, and a seed's runs in it come from one machine (`seed_machines`): one
    table per commit and backend holds each seed from its machine, headed "tensorflow on
    <machine>, commit c" when that is one machine for every seed, else "tensorflow,
    commit c: seed 0 on <machine>; seeds 1, 2 on <machine>". The records of a seed on
    any other machine make a table of that machine, headed as `where` says."""
    chosen = seed_machines(records)
    main: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    found: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        key = (record["backend"], _commit(record))
        if chosen[(*key, record["seed"])] == record["machine"]:
            main.setdefault(key, []).append(record)
        else:
            found.setdefault(where(record), []).append(record)
    headed: dict[str, list[Mapping[str, Any]]] = {}
    for (backend, commit), held in main.items():
        by_machine: dict[str, list[int]] = {}
        for seed in sorted({r["seed"] for r in held}):
            by_machine.setdefault(chosen[(backend, commit, seed)], []).append(seed)
        if len(by_machine) == 1:
            heading = where(held[0])
        else:
            parts = [
                f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} on {machine}"
                for machine, seeds in sorted(by_machine.items(), key=lambda item: item[1][0])
            ]
            heading = f"{backend}, commit {commit}: {'; '.join(parts)}"
        headed[heading] = held
    return {**headed, **found}
