"""partf-study end to end on the tiny plan (studies/tiny.toml): two workers, every run a
partf-train process, stage 2 after its search, resumable after SIGTERM and SIGKILL, a
report whose means are the runs' own.

Module fixtures run the plan once uninterrupted and once (seed 0 only) interrupted twice;
the tests read what they wrote. Those runs take minutes, so their tests are slow.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "studies" / "tiny.toml"
RUNS = [
    *(f"{arm}-s{seed}" for seed in (0, 1) for arm in ("txl", "par", "conv", "recall", "mixed")),
    *(f"{arm}-stage2-s{seed}" for seed in (0, 1) for arm in ("par", "conv", "recall")),
]


def study(out: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    env = {**(env or os.environ), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen(
        [sys.executable, "-m", "partf.cli.study", str(PLAN), "--out", str(out), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen, timeout: float = 900) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def results(out: Path, name: str) -> dict:
    return json.loads((out / "runs" / name / "checkpoints" / name / "results.json").read_text())


def checkpoints(out: Path) -> list[Path]:
    return sorted((out / "runs").glob("*/checkpoints/*/ckpt-*.npz"))


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The tiny plan run uninterrupted with two workers, then run again."""
    out = tmp_path_factory.mktemp("whole")
    status, output = finish(study(out, "--workers", "2"))
    began = time.monotonic()
    again_status, again = finish(study(out, "--workers", "2"))
    return out, status, output, again_status, again, time.monotonic() - began


def _wait_for(condition, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """Seed 0 of the plan: stopped by SIGTERM, then killed by SIGKILL, then finished."""
    out = tmp_path_factory.mktemp("interrupted")
    seed = ("--seeds", "0", "--workers", "2")
    listed = finish(study(out, *seed, "--list"))
    process = study(out, *seed)
    _wait_for(lambda: checkpoints(out))
    process.send_signal(signal.SIGTERM)
    term = finish(process)
    after_term = {p.name for p in checkpoints(out)}
    process = study(out, *seed)
    _wait_for(lambda: len(checkpoints(out)) > len(after_term))
    process.kill()
    process.wait()
    # The runs it had started get SIGTERM as their parent dies, checkpoint and exit; their
    # folder locks keep a new study from training them until they have.
    final = finish(study(out, *seed))
    listed_after = finish(study(out, *seed, "--list"))
    return out, listed, term, final, listed_after


def derived(search: dict) -> str:
    """The architecture a search's stage 2 trains: its argmax blocks, identity dropped
    (the search's own "architecture" keeps its identity blocks)."""
    from partf.training.search import searched_architecture

    return searched_architecture(search["pi"], search["candidates"])


@pytest.mark.slow  # the module fixture runs the 16-run plan: about 6 minutes
def test_the_plan_runs_to_the_end_with_two_workers(whole):
    out, status, output, *_ = whole
    assert status == 0, output
    for name in RUNS:
        assert results(out, name)["test"]["perplexity"] > 1
    # Stage 2 trains the architecture its search derived, with the search's seed.
    for seed in (0, 1):
        search, fixed = results(out, f"par-s{seed}"), results(out, f"par-stage2-s{seed}")
        assert fixed["architecture"] == derived(search)
        assert fixed["config"]["training"]["seed"] == seed
        assert fixed["search"] is None and search["search"] is not None
        # The conversion starts from its seed's txl; its fine-tune from the conversion.
        conv, tuned = results(out, f"conv-s{seed}"), results(out, f"conv-stage2-s{seed}")
        source = out / "runs" / f"txl-s{seed}" / "checkpoints" / f"txl-s{seed}"
        assert conv["config"]["training"]["init_from"] == str(source)
        assert tuned["config"]["training"]["init_from"] == str(
            out / "runs" / f"conv-s{seed}" / "checkpoints" / f"conv-s{seed}"
        )
        assert tuned["architecture"] == derived(conv)
        log = (out / "runs" / f"conv-s{seed}" / "console.log").read_text()
        assert "block 0 <- block 0: relative from relative, identity" in log
        # The recall arm trains on the study's MQAR splits, priced by measured time, and
        # is scored by accuracy; its stage 2 keeps every attention place.
        recall, fixed = results(out, f"recall-s{seed}"), results(out, f"recall-stage2-s{seed}")
        assert "mqar_train" in recall["config"]["training"]["train_directory"]
        assert 0.0 <= recall["test"]["accuracy"] <= 1.0
        assert fixed["architecture"] == derived(recall)
        assert fixed["architecture"].split()[1::2] == ["D", "D"]
        assert "identity" not in recall["candidates"]
        table = out / "runs" / f"recall-s{seed}" / "checkpoints" / f"recall-s{seed}"
        assert set(json.loads((table / "cost_table.json").read_text())["costs"]) == {
            "dense", "identity", "norm", "relative"
        }  # fmt: skip
        # The text arm with recall mixed in trains on the text and the MQAR training
        # split, one MQAR batch after every second text batch, and is scored on both.
        mixed = results(out, f"mixed-s{seed}")
        training = mixed["config"]["training"]
        assert "records_train" in training["train_directory"]
        assert "mqar_train" in training["mix_directory"]
        assert "mqar_test" in training["recall_directory"]
        text_batches = results(out, f"txl-s{seed}")["data"]["batches_per_epoch"]
        assert mixed["data"]["batches_per_epoch"] == text_batches + text_batches // 2
        assert mixed["test"]["perplexity"] > 1 and 0.0 <= mixed["recall"]["accuracy"] <= 1.0
        assert mixed["recall"]["num_tokens"] == 16 * 2  # 16 examples of 2 answers
    # Two at once: some run started before another had finished.
    starts = [line for line in output.splitlines() if ": starting (2 running" in line]
    assert starts, output
    assert (out / "pareto.png").stat().st_size > 0
    assert (out / "recall.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "### Recall (" in report and "- recall-s0: dense " in report
    assert "| recall accuracy % |" in report


@pytest.mark.slow  # reads the whole plan run
def test_a_second_invocation_trains_nothing(whole):
    out, _, _, again_status, again, seconds = whole
    assert again_status == 0, again
    assert "16 of 16 runs finished before; 0 to go" in again
    assert "starting" not in again and "resuming" not in again
    assert seconds < 60


@pytest.mark.slow  # reads the whole plan run
def test_the_report_means_are_the_runs_own(whole):
    out = whole[0]
    report = (out / "report.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("*").removesuffix("** (reference)").strip("*"): line
        for line in report.splitlines()
        if line.startswith("| ") and not line.startswith("| arm")
    }
    header = next(line for line in report.splitlines() if line.startswith("| arm"))
    total = [c.strip() for c in header.split("|")].index("total")  # after recall accuracy
    assert set(rows) == {
        "txl", "par", "par-stage2", "conv", "conv-stage2", "recall", "recall-stage2", "mixed"
    }  # fmt: skip
    for arm, names in {
        "txl": ["txl-s0", "txl-s1"],
        "par": ["par-s0", "par-s1"],
        "par-stage2": ["par-stage2-s0", "par-stage2-s1"],
    }.items():
        cells = [c.strip() for c in rows[arm].split("|")]
        valid = [results(out, n)["valid"]["perplexity"] for n in names]
        test = [results(out, n)["test"]["perplexity"] for n in names]
        flops = [results(out, n)["flops_per_token"]["total"] / 1e6 for n in names]
        assert cells[2] == "2/2"
        assert cells[3] == f"{statistics.fmean(valid):.2f} ({min(valid):.2f}-{max(valid):.2f})"
        assert cells[5] == f"{statistics.fmean(test):.2f} ({min(test):.2f}-{max(test):.2f})"
        assert cells[total].startswith(f"{statistics.fmean(flops):.3f}")
    # A conversion's training compute counts the txl it started from.
    for seed in (0, 1):
        conv = results(out, f"conv-s{seed}")["train_flops"]["total"]
        txl = results(out, f"txl-s{seed}")["train_flops"]["total"]
        assert conv > 0 and txl > 0
    compute = [c.strip() for c in header.split("|")].index("train TFLOPs")
    conv_cells = [c.strip() for c in rows["conv"].split("|")]
    sums = [
        (
            results(out, f"conv-s{s}")["train_flops"]["total"]
            + results(out, f"txl-s{s}")["train_flops"]["total"]
        )
        / 1e12
        for s in (0, 1)
    ]
    assert conv_cells[compute] == f"{statistics.fmean(sums):.1f} ({min(sums):.1f}-{max(sums):.1f})"
    # Every run was measured on this backend and machine, in one table.
    assert report.count("\n## tensorflow on ") == 1


@pytest.mark.slow  # the plan again, interrupted twice: about 2 minutes
def test_a_killed_study_resumes_to_the_same_results(whole, interrupted):
    out, listed, term, final, listed_after = interrupted
    # --list before anything ran: the first-stage runs of seed 0, not yet the stage 2.
    assert listed[0] == 0
    lines = [line for line in listed[1].splitlines() if line.startswith("partf-train ")]
    names = [line.split("--model_name=")[1].split()[0] for line in lines]
    assert names == ["txl-s0", "par-s0", "recall-s0", "mixed-s0"]
    assert term[0] == 128 + signal.SIGTERM, term[1]
    assert "resumes next time" in term[1]
    assert final[0] == 0, final[1]
    assert "resuming at step" in final[1]
    for name in ("txl-s0", "par-s0", "par-stage2-s0"):
        got, want = results(out, name), results(whole[0], name)
        assert got["steps"] == want["steps"]
        for split in ("valid", "test"):
            assert got[split]["perplexity"] == pytest.approx(want[split]["perplexity"], rel=1e-5)
        assert got["architecture"] == want["architecture"]
    # Once everything has finished, nothing is left to list.
    assert listed_after[0] == 0
    assert "partf-train" not in listed_after[1]


@pytest.mark.slow  # the plan on JAX in a TensorFlow-free process: about 2 minutes
def test_the_plan_runs_on_jax_without_tensorflow(whole, tmp_path):
    """Seed 0 of the tiny plan on the JAX backend where `import tensorflow` fails: the
    records the TensorFlow study built are read without it (building them needs it)."""
    pytest.importorskip("jax")
    import shutil

    out = tmp_path / "jax"
    shutil.copytree(whole[0] / "data", out / "data")
    blocker = tmp_path / "blocker"
    for name in ("tensorflow", "tensorflow_text"):
        (blocker / name).mkdir(parents=True)
        (blocker / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT)]),
    }
    process = study(out, "--seeds", "0", "--workers", "2", env=env)
    status, output = finish(process)
    assert status == 0, output
    for name in ("txl-s0", "par-s0", "par-stage2-s0", "mixed-s0"):
        got = results(out, name)
        assert got["test"]["perplexity"] > 1
        log = (out / "runs" / name / "console.log").read_text()
        assert "no tensorflow here" not in log
    assert results(out, "par-stage2-s0")["architecture"] == derived(results(out, "par-s0"))
    record = json.loads((out / "runs" / "txl-s0" / "study.json").read_text())
    assert record["launches"][0]["backend"] == "jax"
    assert "\n## jax on " in (out / "report.md").read_text()
    # TensorBoard scalars appear without TensorFlow too.
    assert list(
        (out / "runs" / "txl-s0" / "logs" / "txl-s0" / "train").glob("events.out.tfevents.*")
    )


def launch_first_run(out: Path, monkeypatch, popen, then=None) -> Path:
    """Launches the tiny plan's first run into `out` through runner.launch with `popen` in
    place of subprocess.Popen, calls `then` (if given) while the run's lock is held, and
    returns the run's folder."""
    from partf.study import runner
    from partf.study.plan import load_plan

    # machine_name and code_version run subprocesses of their own: not these tests'.
    monkeypatch.setattr(runner, "machine_name", lambda: "a machine")
    monkeypatch.setattr(runner, "code_version", lambda: "a version")
    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    plan = load_plan(PLAN)
    paths = runner.StudyPaths(out)
    run = plan.runs()[0]
    lock = runner.try_lock(paths.run_dir(run.name) / ".lock")
    try:
        runner.launch(plan, paths, run, lock)
        if then is not None:
            then()
    finally:
        os.close(lock)
    return paths.run_dir(run.name)


def test_runs_share_a_gpu_without_reserving_its_memory(tmp_path, monkeypatch):
    """Each run is launched with JAX's and TensorFlow's whole-GPU reservations off, so a
    second run on the same GPU finds memory; a value the caller set is kept."""
    seen = []

    class FakePopen:
        def __init__(self, args, **kwargs):
            seen.append(kwargs["env"])

    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "false")
    launch_first_run(tmp_path, monkeypatch, FakePopen)
    (env,) = seen
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"  # the caller's choice stands
    assert env["PATH"] == os.environ["PATH"]


def new_sessions_get_autogroups() -> bool:
    """Whether a new session here gets an autogroup of its own, as the niceness test
    needs. Not where /proc/self/autogroup is absent (not Linux) or the sysctl turns
    autogroups off; and not where the kernel, or a sandbox standing in for it, prints
    nothing for the file, as CI's machine did for the new session's child."""
    if not Path("/proc/self/autogroup").exists():
        return False
    enabled = Path("/proc/sys/kernel/sched_autogroup_enabled")
    if enabled.exists() and enabled.read_text().strip() == "0":
        return False
    child = subprocess.run(
        ["cat", "/proc/self/autogroup"], capture_output=True, text=True, start_new_session=True
    )
    return child.returncode == 0 and bool(child.stdout.strip())


@pytest.mark.skipif(not new_sessions_get_autogroups(), reason="new sessions get no autogroup here")
def test_a_niced_study_runs_its_runs_in_a_niced_scheduling_group(tmp_path, monkeypatch):
    """Each run starts a session of its own, which autogroup scheduling makes a scheduling
    group at nice 0 whatever the study's niceness; launch gives that group the run's
    niceness, so `nice partf-study` yields the CPU. The real Popen runs a script that
    prints its group in place of partf-train, the study's niceness (7) set in the child so
    that this test process keeps its own."""
    real_popen = subprocess.Popen
    children = []

    def fake_popen(args, **kwargs):
        start = kwargs["preexec_fn"]

        def niced_start():
            os.nice(7 - os.nice(0))
            start()

        script = "print(open('/proc/self/autogroup').read())"
        child = real_popen([sys.executable, "-c", script], **{**kwargs, "preexec_fn": niced_start})
        children.append(child)
        return child

    def child_ends_well():
        assert children[0].wait(timeout=60) == 0

    run_dir = launch_first_run(tmp_path, monkeypatch, fake_popen, then=child_ends_well)
    group = (run_dir / "console.log").read_text().split()
    own = Path("/proc/self/autogroup").read_text().split()
    assert group[:1] != own[:1]  # a group of its own
    assert group[1:] == ["nice", "7"]


def test_runs_with_a_checkpoint_resume_before_new_ones(tmp_path):
    """A study started again resumes its half-trained runs before it starts new ones, and
    keeps the plan's order within each group."""
    from partf.study import runner
    from partf.study.plan import load_plan

    runs = load_plan(PLAN).runs()
    paths = runner.StudyPaths(tmp_path)
    started = [runs[-1].name, runs[1].name]
    for name in started:
        paths.checkpoints(name).mkdir(parents=True)
        (paths.checkpoints(name) / "ckpt-64.npz").write_bytes(b"")
    order = [run.name for run in runner.resumed_first(runs, paths)]
    assert order[:2] == [runs[1].name, runs[-1].name]
    assert order[2:] == [run.name for run in runs if run.name not in started]


@pytest.mark.slow  # reads the whole plan run
def test_the_report_from_records_alone_equals_the_one_from_run_folders(whole, tmp_path):
    """Each finished run left its record; copied without a single run folder, the records
    give the same report and plots, byte for byte."""
    out = whole[0]
    records = list((out / "records").glob("*/*.json"))
    assert sorted(p.stem for p in records) == sorted(RUNS)
    assert len({p.parent for p in records}) == 1  # one machine's folder
    alone = tmp_path / "alone"
    shutil.copytree(out / "records", alone / "records")
    status, output = finish(
        subprocess.Popen(
            [sys.executable, "-m", "partf.cli.study", str(PLAN), "--out", str(alone), "--report"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    )
    assert status == 0, output
    assert not (alone / "runs").exists()
    for name in ("report.md", "pareto.png", "recall.png"):
        assert (alone / name).read_bytes() == (out / name).read_bytes(), name


def test_a_run_with_a_committed_record_is_not_trained_again(tmp_path):
    """On a new machine (no run folders) a run with a record is done; a recorded run is
    trained again only where a run still to train starts from its weights."""
    from partf.study import runner
    from partf.study.plan import load_plan

    runs = load_plan(PLAN).runs()
    paths = runner.StudyPaths(tmp_path)
    every = [run.name for run in runs]
    assert [r.name for r in runner.to_train(runs, paths)] == every
    # Everything of seed 0 recorded, conv-stage2-s0 aside: it starts from conv-s0's
    # weights, and conv-s0 from txl-s0's, so those two train again; the rest of seed 0 not.
    recorded = {run.name for run in runs if run.seed == 0} - {"conv-stage2-s0"}
    todo = [r.name for r in runner.to_train(runs, paths, recorded)]
    assert [n for n in todo if n.endswith("-s0")] == ["txl-s0", "conv-s0", "conv-stage2-s0"]
    assert [n for n in todo if n.endswith("-s1")] == [n for n in every if n.endswith("-s1")]
    # With conv-s0's folder here (finished), only the stage 2 trains.
    paths.checkpoints("conv-s0").mkdir(parents=True)
    (paths.checkpoints("conv-s0") / "results.json").write_text("{}")
    todo = [r.name for r in runner.to_train(runs, paths, recorded)]
    assert [n for n in todo if n.endswith("-s0")] == ["conv-stage2-s0"]
