"""Run records: built from a run folder, written, read back, checked, and the report built
from them alone, one table per commit, backend and machine."""

from __future__ import annotations

import json
import shutil

import pytest

from partf.cli.study import main
from partf.study.paths import StudyPaths
from partf.study.plan import load_plan
from partf.study.records import (
    RECORD_KEY,
    RECORD_VERSION,
    RecordError,
    build_record,
    file_records,
    open_seeds,
    read_record,
    read_records,
    record_path,
    recorded_on,
    seed_machines,
    sync_records,
    tables,
    where,
    write_json,
)
from partf.study.report import gather, write_report
from tests.study.fake_runs import PLAN, fake_run


def launch(code: str = "c0ffee0" + "0" * 33, backend: str = "tensorflow", machine: str = "m"):
    return {"code": code, "backend": backend, "machine": machine, "versions": {"keras": "3"}}


def test_a_record_round_trips(tmp_path):
    results = {"valid": {"perplexity": 4.5}, "test": {"accuracy": 0.5}, "search": None}
    record = build_record("a-s1", "a", 1, results, {"launches": [launch()], "command": ["x"]})
    path = record_path(tmp_path, "a-s1", "m")
    write_json(path, record)
    assert path == tmp_path / "m" / "a-s1.json"
    assert read_record(path) == record
    assert read_records(tmp_path) == [record]
    assert record[RECORD_KEY] == RECORD_VERSION
    assert record["versions"] == {"keras": "3"} and record["results"] == results
    assert where(record) == "tensorflow on m, commit c0ffee0"


def test_a_run_resumed_elsewhere_is_mixed():
    study = {"launches": [launch(), launch(backend="jax", code="beef" * 10)]}
    record = build_record("a-s0", "a", 0, {}, study)
    assert record["backend"] == "mixed: tensorflow + jax"
    assert record["commit"] == "mixed: " + "c0ffee0" + "0" * 33 + " + " + "beef" * 10


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"partf_record": 1, "run": "a-s0", "arm"', "is not valid JSON (truncated or corrupt"),
        ("[1, 2]", "is not a partf run record"),
        ('{"partf_record": 1, "run": "a-s0"}', "lacks 'arm'"),
        (
            '{"partf_record": 99, "run": "a-s0"}',
            "has record version 99, newer than this partf reads (1); update partf.",
        ),
    ],
)
def test_a_bad_record_is_refused_in_one_line_naming_the_file(tmp_path, capsys, text, expected):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    records = tmp_path / "out" / "records"
    records.mkdir(parents=True)
    (records / "txl-s0.json").write_text(text)
    with pytest.raises(RecordError, match="txl-s0.json"):
        read_record(records / "txl-s0.json")
    assert main([str(plan), "--out", str(tmp_path / "out"), "--report"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(records / "txl-s0.json") in lines[0] and expected in lines[0]
    assert not (tmp_path / "out" / "report.md").exists()


def test_runs_of_another_commit_or_machine_land_in_their_own_table(tmp_path):
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    plan = load_plan(plan_file)
    folder = tmp_path / "out" / "records"
    places = [
        ("txl-s0", launch()),
        ("par-s0", launch()),
        ("txl-s1", launch(code="1" * 40)),  # another commit
        ("par-s0", launch(machine="other")),  # seed 0 again, on another machine
    ]
    for name, place in places:
        results = {"valid": {"perplexity": 40.0 + len(name)}, "architecture": "A D"}
        write_json(
            record_path(folder, name, place["machine"]),
            build_record(name, name[:3], int(name[-1]), results, {"launches": [place]}),
        )
    report = write_report(plan, StudyPaths(tmp_path / "out")).read_text()
    headings = [line for line in report.splitlines() if line.startswith("## ")]
    assert headings == [
        "## tensorflow on m, commit c0ffee0",
        "## tensorflow on m, commit 1111111",
        "## tensorflow on other, commit c0ffee0",
    ]
    # The second table shares the reference arm with the first: the figure linking them.
    assert "Linked to the first table by `txl`: valid ppl 46.00 here, 46.00 there" in report


def test_the_report_reads_records_alone_and_equals_the_one_from_run_folders(tmp_path):
    """The records are written from the run folders when a report is made; the run
    folders gone, the same report comes from the records alone, byte for byte."""
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    plan = load_plan(plan_file)
    paths = StudyPaths(tmp_path / "out")
    fake_run(paths, "txl-s0", 40.0, 3e6, ["jax"])
    fake_run(paths, "par-s0", 44.1, 2e6, ["jax"], recall=0.5)
    from_folders = write_report(plan, paths).read_text()
    assert sorted(r["run"] for r in read_records(paths.out / "records")) == ["par-s0", "txl-s0"]
    pareto = (paths.out / "pareto.png").read_bytes()
    shutil.rmtree(paths.out / "runs")
    (paths.out / "report.md").unlink()
    assert write_report(plan, paths).read_text() == from_folders
    assert (paths.out / "pareto.png").read_bytes() == pareto


def test_a_plan_with_a_results_folder_reports_without_out(tmp_path, capsys):
    """`results = ...` in the plan: records and report live there; --report needs no
    --out, and syncing leaves a record unchanged when nothing changed."""
    (tmp_path / "studies").mkdir()
    plan_file = tmp_path / "studies" / "plan.toml"
    plan_file.write_text('results = "results/plan"\n' + PLAN)
    plan = load_plan(plan_file)
    paths = StudyPaths(tmp_path / "out")
    fake_run(paths, "txl-s0", 40.0, 3e6, ["jax"])
    folder = tmp_path / "studies" / "results" / "plan"
    assert sync_records(plan, paths, folder / "records") == ["txl-s0"]
    assert sync_records(plan, paths, folder / "records") == []
    assert main([str(plan_file), "--report"]) == 0
    report = (folder / "report.md").read_text()
    assert "| 1/2 | 40.00 |" in report and f"`partf-study {plan_file} --report`" in report
    assert main([str(plan_file)]) == 2
    assert "--out is required" in capsys.readouterr().err


def test_a_changed_record_changes_the_report(tmp_path):
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    plan = load_plan(plan_file)
    paths = StudyPaths(tmp_path / "out")
    fake_run(paths, "txl-s0", 40.0, 3e6, ["jax"])
    before = write_report(plan, paths).read_text()
    shutil.rmtree(paths.out / "runs")
    path = record_path(paths.out / "records", "txl-s0", "m")
    record = json.loads(path.read_text())
    record["results"]["valid"]["perplexity"] = 41.0
    write_json(path, record)
    after = write_report(plan, paths).read_text()
    assert before != after and "| 1/2 | 41.00 |" in after


def test_a_run_recorded_on_two_machines_keeps_both_each_in_its_own_table(tmp_path):
    """A run trained again on another machine (its weights lost with the first) files a
    second record beside the first; each machine's table shows its own, a run started
    from it is linked to the one of its own machine, and a study counts as finished only
    the runs recorded on its own machine."""
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN + 'ft = { init_from = "txl", flags = "--max_steps=10" }\n')
    plan = load_plan(plan_file)
    folder = tmp_path / "records"

    def record(name: str, machine: str, perplexity: float) -> dict:
        results = {"valid": {"perplexity": perplexity}, "train_flops": {"total": perplexity}}
        return build_record(name, name[:-3], 0, results, {"launches": [launch(machine=machine)]})

    for machine, perplexity in (("m", 40.0), ("other", 50.0)):
        study = tmp_path / machine  # the flat records folder a study on that machine wrote
        write_json(study / "txl-s0.json", record("txl-s0", machine, perplexity))
        assert file_records(study, folder) == [record_path(folder, "txl-s0", machine)]
        assert file_records(study, folder) == []  # unchanged: nothing written
    write_json(record_path(folder, "ft-s0", "other"), record("ft-s0", "other", 5.0))
    records = read_records(folder)
    assert len(records) == 3
    assert recorded_on(records, "m") == {"txl-s0"}
    assert recorded_on(records, "other") == {"txl-s0", "ft-s0"}
    found = {(r.name, r.where.split(",")[0]): r for r in gather(plan, records) if r.finished}
    assert found["txl-s0", "tensorflow on m"].value("valid", "perplexity") == 40.0
    assert found["txl-s0", "tensorflow on other"].value("valid", "perplexity") == 50.0
    # ft-s0 started from the txl-s0 of its own machine: its training counts that one's.
    assert found["ft-s0", "tensorflow on other"].train_flops == 55.0


def test_a_seed_comes_from_one_machine_and_a_table_names_each_seeds_machine(tmp_path):
    """One table per commit and backend takes each seed's runs from the machine that
    recorded most of them, its heading naming each seed's machine; the records of a seed
    on another machine make that machine's table, and a conversion is linked to the run
    it started from on its own machine."""
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN + 'ft = { init_from = "txl", flags = "--max_steps=10" }\n')
    plan = load_plan(plan_file)

    def record(name: str, machine: str, flops: float, commit: str = "c0ffee0" + "0" * 33):
        results = {"valid": {"perplexity": flops}, "train_flops": {"total": flops}}
        seed = int(name[-1])
        study = {"launches": [launch(machine=machine, code=commit)]}
        return build_record(name, name.split("-")[0], seed, results, study)

    records = [
        record("txl-s0", "a", 10.0),
        record("ft-s0", "a", 1.0),
        record("txl-s0", "b", 20.0),  # seed 0 again on b: b's own table
        record("txl-s1", "b", 30.0),
        record("ft-s1", "b", 2.0),
        record("txl-s1", "a", 40.0, commit="beef" * 10),  # another commit: its own table
    ]
    assert seed_machines(records) == {
        ("tensorflow", "c0ffee0", 0): "a",
        ("tensorflow", "c0ffee0", 1): "b",
        ("tensorflow", "beefbee", 1): "a",
    }
    split = {heading: sorted(r["run"] for r in held) for heading, held in tables(records).items()}
    assert split == {
        "tensorflow, commit c0ffee0: seed 0 on a; seed 1 on b": [
            "ft-s0",
            "ft-s1",
            "txl-s0",
            "txl-s1",
        ],
        "tensorflow on a, commit beefbee": ["txl-s1"],
        "tensorflow on b, commit c0ffee0": ["txl-s0"],
    }
    found = {(r.name, r.where): r for r in gather(plan, records) if r.finished}
    main = "tensorflow, commit c0ffee0: seed 0 on a; seed 1 on b"
    # Each conversion counts the training of the source of its own seed's machine.
    assert found["ft-s0", main].train_flops == 11.0
    assert found["ft-s1", main].train_flops == 32.0
    assert found["txl-s0", "tensorflow on b, commit c0ffee0"].value("valid", "perplexity") == 20.0
    # One machine for every seed: the heading is that machine's.
    assert list(tables(records[:2])) == ["tensorflow on a, commit c0ffee0"]


def test_the_open_seeds_are_those_no_machine_recorded_whole(tmp_path):
    """What pinned_study.sh runs: seed 0, recorded whole on one machine, is done; seed 1,
    recorded whole only across two machines, is not."""
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    plan = load_plan(plan_file)
    out = tmp_path / "out"
    assert open_seeds(plan, out) == [0, 1]
    places = [(run.name, "a") for run in plan.runs() if run.seed == 0]
    places += [("txl-s1", "a"), ("par-s1", "b"), ("par-stage2-s1", "b")]
    for name, machine in places:
        seed = int(name[-1])
        study = {"launches": [launch(machine=machine)]}
        record = build_record(name, name.split("-")[0], seed, {}, study)
        write_json(record_path(out / "records", name, machine), record)
    assert open_seeds(plan, out) == [1]
