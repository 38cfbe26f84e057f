"""Pages from records: the generated tables of the README and docs/, and each plan's
committed report, equal what the committed records give; a changed record makes them
stale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partf.study.pages import render, stale_blocks, update_pages
from partf.study.paths import StudyPaths
from partf.study.plan import load_plan
from partf.study.records import record_path, write_json
from partf.study.report import write_report
from tests.study.fake_runs import PLAN, fake_run

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted(p for p in (ROOT / "studies").glob("*.toml") if load_plan(p).results)


def test_every_generated_table_of_the_pages_equals_its_records():
    assert stale_blocks(ROOT) == []


def _software(png: bytes) -> bytes:
    """The PNG's Software text chunk (matplotlib writes its version there)."""
    at = png.find(b"Software\x00")
    return png[at : png.find(b"\x00", at + 9) if at >= 0 else at] if at >= 0 else b""


@pytest.mark.parametrize("plan_file", RESULTS, ids=[p.stem for p in RESULTS])
def test_each_committed_report_is_what_its_records_give(plan_file, tmp_path):
    plan = load_plan(plan_file)
    committed = plan.results / "report.md"
    if not (plan.results / "records").is_dir():
        assert not committed.exists(), "a report without records"
        return
    fresh = write_report(plan, None, into=tmp_path)
    assert fresh.read_text() == committed.read_text(), f"run partf-study {plan_file} --report"
    for png in sorted(tmp_path.glob("*.png")):
        kept = (plan.results / png.name).read_bytes()
        # Bytes match only under the matplotlib version that drew the committed plot.
        if _software(kept) == _software(png.read_bytes()):
            assert png.read_bytes() == kept, png.name


PAGE = """# A page

<!-- generated: `partf-study studies/plan.toml --report`, perplexity: par txl -->
stale
<!-- end of generated table -->

Text after.
"""


def test_a_changed_record_makes_its_page_stale(tmp_path):
    (tmp_path / ".git").mkdir()  # the repository's root: paths are shown relative to it
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "plan.toml").write_text('results = "results/plan"\n' + PLAN)
    plan = load_plan(tmp_path / "studies" / "plan.toml")
    paths = StudyPaths(tmp_path / "out")
    fake_run(paths, "txl-s0", 40.0, 3e6, ["jax"])
    fake_run(paths, "par-s0", 44.1, 2e6, ["jax"])
    write_report(plan, paths)
    (tmp_path / "README.md").write_text(PAGE)
    assert len(stale_blocks(tmp_path)) == 1
    assert update_pages(tmp_path) == ["README.md"] and stale_blocks(tmp_path) == []
    page = (tmp_path / "README.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| arm | seeds | valid ppl") and len(rows) == 3
    assert rows[1].startswith("| par | 1/2 | 44.10") and rows[2].startswith("| **txl**")
    assert page.endswith("<!-- end of generated table -->\n\nText after.\n")
    # A record changed: the page no longer says what the records give.
    path = record_path(plan.results / "records", "par-s0", "m")
    record = json.loads(path.read_text())
    record["results"]["valid"]["perplexity"] = 45.0
    write_json(path, record)
    assert stale_blocks(tmp_path) == [
        "README.md: the perplexity table of studies/plan.toml differs from its records; "
        "run scripts/update_pages.py"
    ]


def test_a_block_follows_its_records_and_refuses_an_arm_not_in_the_plan():
    report = "| arm | seeds | valid ppl |\n|---|---|---|\n| txl | 1/1 | 4 |\n"
    assert render(report, "perplexity", 1, []) == report
    # par has no record yet: left out until it has one; no recall table yet: empty.
    assert render(report, "perplexity", 1, ["par", "txl"], ["txl", "par"]) == report
    assert render(report, "recall", 1, []) == ""
    with pytest.raises(ValueError, match="the plan has no arm 'parr'"):
        render(report, "perplexity", 1, ["parr"], ["txl", "par"])
    # Each table of a report is one machine's: the block names the one it took.
    two = f"## jax on m, commit c1\n\n{report}\n## jax on n, commit c1\n\n{report}"
    assert render(two, "perplexity", 2, []) == f"Records: jax on n, commit c1.\n\n{report}"
