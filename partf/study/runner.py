"""Running a study: each run a `partf-train` process, several at once, resumable.

docs/study.md ("Running, stopping, resuming") gives the layout under `out/runs/<name>/`,
when a run is finished (`to_train`), and the folder's `.lock` that the study and the
process (which inherits it) hold, so that no run is trained twice at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from partf import tasks
from partf.atomic import atomic_write_text
from partf.study.data import records_of, task_folders, tokenizer_of
from partf.study.paths import StudyPaths
from partf.study.plan import Plan, Run

#: Seconds between the status lines of a running study.
STATUS_EVERY = 60.0


# ------------------------------------------------------------------ commands
def train_args(plan: Plan, paths: StudyPaths, run: Run) -> list[str]:
    """partf-train's arguments for `run` (without the program)."""
    own = [f"--model_name={run.name}", f"--output_dir={paths.run_dir(run.name)}"]
    if run.init_from is not None:  # a conversion or fine-tune of a finished run
        own.append(f"--init_from={paths.checkpoints(run.init_from)}")
    if run.after is not None:  # stage 2: the search's data, settings and seed
        return [f"--from_search={paths.checkpoints(run.after)}", *own, *run.flags]
    trained, mixed = tasks.plan_task(run.task)
    if trained.drawn:
        folders = task_folders(paths, trained.name)
        return [*(f"--{k}_directory={v}" for k, v in folders.items()), *run.flags,
                f"--seed={run.seed}", *own]  # fmt: skip
    records = records_of(plan, paths)
    data = [f"--{split}_directory={folder}" for split, folder in records.items()]
    for split in ("valid", "test"):
        if split not in records:
            data.append(f"--{split}_directory=")
    tokenizer = tokenizer_of(plan, paths)
    if tokenizer:
        data.append(f"--sp_model_prefix={tokenizer}")
    if mixed is not None:  # a task asked of the text model: trained and scored
        folders = task_folders(paths, mixed.name)
        data += [f"--mix_directory={folders['train']}", f"--recall_directory={folders['test']}"]
    return [*data, *run.flags, f"--seed={run.seed}", *own]


def ready(run: Run, paths: StudyPaths) -> bool:
    """Whether `run` can start: once the runs it needs (a stage 2's search, the run it
    starts from) have finished."""
    return all(paths.finished(name) for name in run.needs)


# ------------------------------------------------------------------ environment
def machine_name() -> str:
    """The accelerator, else the CPU, with its count: what a run's speed depends on."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split("\n")
        gpus = [line.strip() for line in found if line.strip()]
        if gpus:
            return f"{len(gpus)}x {gpus[0]}"
    cpu = platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    cpu = fields.get("model name", cpu)
    if "cpu family" in fields and "model" in fields:  # "AMD EPYC" alone names many chips
        cpu += f" (family {fields['cpu family']} model {fields['model']})"
    return f"{os.cpu_count()}-core {cpu}"


def code_version() -> str:
    """The git commit partf runs from ("+changes" when its files differ from it), or
    the package version outside a checkout."""
    import partf

    source = Path(partf.__file__).resolve().parents[1]
    with contextlib.suppress(OSError, subprocess.SubprocessError):

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(source), *args], capture_output=True, text=True, check=True
            ).stdout.strip()

        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--", "partf")
        return commit + ("+changes" if changed else "")
    return f"partf {partf.__version__}"


def library_versions() -> dict[str, str]:
    """The versions of Python and of the libraries a run's figures depend on (those
    installed; read without importing them)."""
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in ("keras", "tensorflow", "jax", "jaxlib", "numpy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


# ------------------------------------------------------------------ processes
# What every run's environment holds unless the caller's sets it. Several runs share one
# GPU, so none may take it whole at start: JAX reserves 75% of the GPU's memory for its
# first process and TensorFlow nearly all of it, and the second run would stop out of memory.
RUN_ENVIRONMENT_DEFAULTS = {
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
}


def run_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """A run's environment: `environ`, with `RUN_ENVIRONMENT_DEFAULTS` where it sets none."""
    return {**RUN_ENVIRONMENT_DEFAULTS, **environ}


def keep_niceness(autogroup: str = "/proc/self/autogroup", tries: int = 20) -> None:
    """In a child that has just started a session of its own: give the session's
    scheduling group the process's niceness.

    With Linux's autogroup scheduling every session is a scheduling group, and groups
    share the CPU by the group's own nice value, 0 for a new one, so `nice partf-study`
    alone would not lower its runs' share (docs/study.md). Raising a group's nice needs no
    privilege; the kernel allows ten changes a second and answers EAGAIN beyond that, so
    a few retries cover runs starting together. Nothing happens where the file is absent
    or at nice 0.
    """
    with contextlib.suppress(OSError):
        niceness = os.getpriority(os.PRIO_PROCESS, 0)
        if niceness <= 0:
            return
        fd = os.open(autogroup, os.O_WRONLY)  # absent: FileNotFoundError, suppressed
        try:
            for _ in range(tries):
                try:
                    os.write(fd, str(niceness).encode())
                    return
                except BlockingIOError:  # EAGAIN: another change within the last 0.1 s
                    time.sleep(0.1)
        finally:
            os.close(fd)


def _start_child() -> None:
    """Runs in each partf-train child before it starts (after its new session): SIGTERM
    when the study dies (even by SIGKILL), so an orphan checkpoints and stops instead of
    training on unwatched (Linux only), and the study's niceness."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    keep_niceness()


@dataclasses.dataclass
class Child:
    """A running partf-train process."""

    run: Run
    process: subprocess.Popen
    lock: int
    started: float


def try_lock(path: Path) -> int | None:
    """An exclusive lock on `path` (its fd), or None when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2) + "\n")


def launch(plan: Plan, paths: StudyPaths, run: Run, lock: int) -> Child:
    """Starts `run`'s partf-train, recording the launch in its study.json."""
    args = train_args(plan, paths, run)
    record_path = paths.record(run.name)
    record: dict[str, Any] = {"name": run.name, "arm": run.arm, "seed": run.seed, "launches": []}
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(record_path.read_text())
    record["command"] = ["partf-train", *args]
    record["launches"].append(
        {
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),  # Keras's default
            "machine": machine_name(),
            "code": code_version(),
            "versions": library_versions(),
            "host": platform.node(),
        }
    )
    _write_json(record_path, record)
    console = open(paths.console(run.name), "ab")  # noqa: SIM115
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "partf.cli.train", *args],
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            env=run_environment(os.environ),
            pass_fds=(lock,),  # the lock lasts as long as the process
            start_new_session=True,  # Ctrl-C reaches the study, which stops each run in turn
            preexec_fn=_start_child,  # noqa: PLW1509 (no threads here)
        )
    finally:
        console.close()
    return Child(run, process, lock, time.monotonic())


def note_status(paths: StudyPaths, name: str, status: str) -> None:
    """Records how a run's last launch ended in its study.json."""
    path = paths.record(name)
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(path.read_text())
        record["status"] = status
        _write_json(path, record)


def to_train(runs: list[Run], paths: StudyPaths, recorded: Collection[str] = ()) -> list[Run]:
    """The runs of `runs` still to train, in their order: those with neither a finished
    run folder nor a record in `recorded`, and a recorded run whose folder is gone when a
    run still to train starts or derives from it (its weights live only in its folder)."""
    names = {r.name for r in runs if not paths.finished(r.name) and r.name not in recorded}
    grew = True
    while grew:  # a source trained again may need its own source in turn
        needed = {need for r in runs if r.name in names for need in r.needs}
        more = {n for n in needed - names if not paths.finished(n)}
        names |= more
        grew = bool(more)
    return [run for run in runs if run.name in names]


def resumed_first(runs: list[Run], paths: StudyPaths) -> list[Run]:
    """`runs` with those that have a checkpoint first, each group in plan order: a study
    started again with more arms would otherwise give a slot to a new arm's run while one
    already half trained waits."""
    return sorted(runs, key=lambda run: paths.run(run.name).newest_step() is None)


# ------------------------------------------------------------------ the loop
@dataclasses.dataclass
class Outcome:
    """What one invocation of the study did."""

    finished: list[str] = dataclasses.field(default_factory=list)
    failed: dict[str, int] = dataclasses.field(default_factory=dict)
    elsewhere: list[str] = dataclasses.field(default_factory=list)
    signum: int | None = None


def _start_next(
    plan: Plan,
    paths: StudyPaths,
    waiting: list[Run],
    running: dict[str, Child],
    outcome: Outcome,
    say: Callable[[str], None],
) -> Child | None:
    """Launches the first ready run of `waiting` that no other process is training;
    None when there is none. Runs another process finished meanwhile leave `waiting`."""
    for run in [r for r in waiting if ready(r, paths)]:
        if paths.finished(run.name):
            waiting.remove(run)
            continue
        lock = try_lock(paths.run_dir(run.name) / ".lock")
        if lock is None:
            if run.name not in outcome.elsewhere:
                outcome.elsewhere.append(run.name)
                say(f"{run.name}: trained by another process now; waiting for it")
            continue
        waiting.remove(run)
        step = paths.run(run.name).newest_step()
        how = f"resuming at step {step}" if step else "starting"
        running[run.name] = child = launch(plan, paths, run, lock)
        say(f"{run.name}: {how} ({len(running)} running, {len(waiting)} waiting)")
        return child
    return None


@contextlib.contextmanager
def _signals_caught(outcome: Outcome) -> Iterator[None]:
    def stop(signum: int, frame: Any) -> None:
        outcome.signum = signum

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_study(
    plan: Plan,
    paths: StudyPaths,
    runs: list[Run],
    workers: int,
    say: Callable[[str], None],
    on_end: Callable[[], None],
    recorded: Collection[str] = (),
) -> Outcome:
    """Trains the unfinished ones of `runs` (`to_train`: a run with a record in
    `recorded` counts as finished), `workers` at a time, stage 2 as soon as its search
    finished; `on_end()` after each run ends (the report is rewritten there).

    A SIGINT or SIGTERM stops launching, sends SIGTERM to every running process (each
    writes a checkpoint and exits) and waits for them.
    """
    outcome = Outcome()
    waiting = resumed_first(to_train(runs, paths, recorded), paths)
    done_before = len(runs) - len(waiting)
    if done_before:
        say(f"{done_before} of {len(runs)} runs finished before; {len(waiting)} to go")
    running: dict[str, Child] = {}
    last_status = time.monotonic()
    with _signals_caught(outcome):
        while waiting or running:
            while outcome.signum is None and len(running) < workers:
                child = _start_next(plan, paths, waiting, running, outcome, say)
                if child is None:
                    break
            if not running:
                if outcome.signum is not None:
                    break
                held = set(outcome.elsewhere)
                if any(r.name in held or held & set(r.needs) for r in waiting):
                    time.sleep(2.0)  # another process trains what the rest waits on
                    continue
                # What is left waits on runs that failed or were not selected.
                for run in waiting:
                    unfinished = [n for n in run.needs if not paths.finished(n)]
                    say(f"{run.name}: not started ({', '.join(unfinished)} did not finish)")
                break
            time.sleep(0.5)
            if outcome.signum is not None:
                for child in running.values():
                    with contextlib.suppress(ProcessLookupError):
                        child.process.send_signal(signal.SIGTERM)
            for name, child in list(running.items()):
                status = child.process.poll()
                if status is None:
                    continue
                del running[name]
                os.close(child.lock)
                minutes = (time.monotonic() - child.started) / 60
                if status == 0 and paths.finished(name):
                    outcome.finished.append(name)
                    note_status(paths, name, "finished")
                    say(f"{name}: finished in {minutes:.1f} min")
                elif outcome.signum is not None:
                    note_status(paths, name, "stopped")
                    step = paths.run(name).newest_step()
                    say(f"{name}: stopped at step {step} (resumes next time)")
                else:
                    outcome.failed[name] = status
                    note_status(paths, name, f"failed (status {status})")
                    log = paths.console(name)
                    say(f"{name}: failed with status {status} after {minutes:.1f} min; see {log}")
                    waiting = [r for r in waiting if name not in r.needs]
                on_end()
            if outcome.signum is not None and not running:
                break
            if running and time.monotonic() - last_status >= STATUS_EVERY:
                last_status = time.monotonic()
                states = ", ".join(
                    f"{name} step {paths.run(name).newest_step() or 0}" for name in running
                )
                say(f"running: {states}; {len(waiting)} waiting")
    return outcome


def list_commands(plan: Plan, paths: StudyPaths, runs: list[Run]) -> list[str]:
    """The partf-train command of every unfinished run that is ready, one per line."""
    return [
        shlex.join(["partf-train", *train_args(plan, paths, run)])
        for run in runs
        if not paths.finished(run.name) and ready(run, paths)
    ]
