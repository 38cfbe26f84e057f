"""partf-study's command line: each mistake is one line with the fix and exit status 2,
answered before anything is built or trained (and nothing is written); `--report` with
`--seeds` or `--arms` reports those runs only."""

from __future__ import annotations

from pathlib import Path

import pytest

from partf.cli.study import main
from partf.study.paths import StudyPaths
from tests.study.fake_runs import PLAN, fake_run

TINY = str(Path(__file__).resolve().parents[2] / "studies" / "tiny.toml")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["missing.toml"], "does not exist; give a TOML file"),
        (
            [TINY, "--arms", "nope"],
            "--arms nope is not in the plan; its arms: conv, mixed, par, recall, txl.",
        ),
        ([TINY, "--seeds", "7"], "--seeds 7 is not in the plan; its seeds: [0, 1]."),
        ([TINY, "--workers", "0"], "--workers must be 1 or more, not 0."),
        ([TINY, "--report"], "holds no run records yet; run partf-study"),
    ],
)
def test_mistakes_exit_2_with_one_line_and_write_nothing(argv, expected, tmp_path, capsys):
    out = tmp_path / "study"
    assert main([*argv, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("partf-study: error: ")
    assert expected in lines[0]
    assert not out.exists()


def _table_row(report: str, arm: str) -> str:
    return next(line for line in report.splitlines() if line.startswith(f"| {arm}"))


def test_a_report_of_some_seeds_or_arms_leaves_the_others_out(tmp_path):
    """The whole plan's report mixes seeds (txl over two, par over one); asked for seed 0,
    every arm's mean is over seed 0 alone and seed 1's runs are not listed as unfinished."""
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    out = tmp_path / "out"
    paths = StudyPaths(out)
    for name, valid in (("txl-s0", 40.0), ("txl-s1", 42.0), ("par-s0", 44.1)):
        fake_run(paths, name, valid, 3e6 if name.startswith("txl") else 2e6, ["jax"])
    assert main([str(plan), "--out", str(out), "--report"]) == 0
    whole = (out / "report.md").read_text()
    assert "| 2/2 | 41.00 (40.00-42.00) |" in _table_row(whole, "**txl**")
    assert "No record yet (3): par-stage2-s0, par-s1, par-stage2-s1." in whole

    assert main([str(plan), "--out", str(out), "--report", "--seeds", "0"]) == 0
    seed0 = (out / "report.md").read_text()
    assert "| 1/1 | 40.00 | +0.0% |" in _table_row(seed0, "**txl**")
    # against seed 0's txl (40.00), not the two seeds' mean (41.00, which gives +7.6%)
    assert "| 1/1 | 44.10 | +10.3% |" in _table_row(seed0, "par |")
    assert "par-s1" not in seed0 and "--seeds 0 --report`" in seed0

    assert main([str(plan), "--out", str(out), "--report", "--arms", "txl"]) == 0
    txl = (out / "report.md").read_text()
    assert "| par |" not in txl and "par-s" not in txl
    assert "| 2/2 | 41.00 (40.00-42.00) |" in _table_row(txl, "**txl**")


def test_a_study_trains_again_what_only_another_machine_recorded(tmp_path, monkeypatch):
    """A run with a record of this machine is finished; one recorded only on another
    machine is trained here too (the same run can end elsewhere on another CPU), unless
    that machine recorded its whole seed (a seed's runs all come from one machine)."""
    from partf.study import runner
    from partf.study.plan import load_plan
    from partf.study.records import build_record, record_path, write_json

    out = tmp_path / "study"
    whole_seed = [run.name for run in load_plan(Path(TINY)).runs() if run.seed == 1]
    recorded = [("txl-s0", "this machine"), ("par-s0", "another machine")]
    recorded += [(name, "a third machine") for name in whole_seed]
    for name, machine in recorded:
        study = {"launches": [{"code": "c" * 40, "backend": "jax", "machine": machine}]}
        seed = int(name.rsplit("-s", 1)[1])
        record = build_record(name, name[:3], seed, {"valid": {"perplexity": 4.0}}, study)
        write_json(record_path(out / "records", name, machine), record)
    given = {}

    def run_study(plan, paths, runs, workers, say, report, recorded):
        given["recorded"] = set(recorded)
        return runner.Outcome()

    monkeypatch.setattr(runner, "machine_name", lambda: "this machine")
    monkeypatch.setattr(runner, "run_study", run_study)
    monkeypatch.setattr("partf.study.report.write_report", lambda *a, **k: out / "report.md")
    assert main([TINY, "--out", str(out), "--seeds", "0"]) == 0
    assert given["recorded"] == {"txl-s0", *whole_seed}
    # One run short of a whole seed: the other machine's runs are trained here again.
    record_path(out / "records", whole_seed[-1], "a third machine").unlink()
    assert main([TINY, "--out", str(out), "--seeds", "0"]) == 0
    assert given["recorded"] == {"txl-s0"}
