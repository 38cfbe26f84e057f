"""The recall part of a study's report: accuracy means and spreads, the softmax places of
each architecture, measured time per token, each search's prices, and the plot."""

from __future__ import annotations

import json
import statistics

import pytest

from partf.study.recall import (
    cost_lines,
    recall_plot,
    recall_table,
    side_by_side,
    softmax_blocks,
    train_us_per_token,
)
from partf.study.report import ArmRow, RunRecord


def run(name: str, arch: str, valid: float | None, test: float | None, steps_per_s=2.0):
    results = {
        "valid": {"perplexity": 1.5, "accuracy": valid},
        "test": {"perplexity": 1.6, "accuracy": test},
        "architecture": arch,
        "data": {"batch_size": 16, "seq_len": 256},
        "search": {"preset": "par"} if name.startswith("search-s") else None,
    }
    record = RunRecord(name, name.rsplit("-s", 1)[0], 0, "tf on m", results, "finished")
    record.steps_per_second = steps_per_s
    return record


ROWS = [
    ArmRow("softmax", 3, [
        run("softmax-s0", "relative D relative D relative D relative D", 1.0, 0.99),
        run("softmax-s1", "relative D relative D relative D relative D", 0.98, 0.97, 1.0),
    ]),
    ArmRow("soft4", 3, [run("soft4-s0", "norm D norm D norm D relative D", 0.5, 0.4)]),
    ArmRow("txl", 3, [run("txl-s0", "A D", None, None)]),  # a text arm: no accuracy
]  # fmt: skip


def test_the_table_gives_each_recall_arms_accuracy_and_time():
    lines = recall_table(ROWS)
    assert lines[0].startswith("| arm | seeds | test accuracy %")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")] for line in lines[2:]}
    assert set(rows) == {"softmax", "soft4"}  # the text arm has no accuracy
    test = [99.0, 97.0]
    assert rows["softmax"][2] == "2/3"
    assert rows["softmax"][3] == f"{statistics.fmean(test):.1f} (97.0-99.0)"
    assert rows["softmax"][4] == "99.0 (98.0-100.0)"
    # 1e6 / (steps/s x 16 x 256) microseconds per token, per run.
    times = [1e6 / (2.0 * 4096), 1e6 / (1.0 * 4096)]
    assert (
        rows["softmax"][5] == f"{statistics.fmean(times):.2f} ({min(times):.2f}-{max(times):.2f})"
    )
    assert rows["softmax"][6] == "4 of 4" and rows["soft4"][6] == "1 of 4"
    assert rows["soft4"][3] == "40.0"


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        ("relative D norm D local D linear D", "1 of 4"),
        ("A D A D", "2 of 2"),
        ("norm D norm D", "0 of 2"),
        ("D I D", "0 of 0"),
        (None, "-"),
    ],
)
def test_softmax_blocks_counts_softmax_among_the_attention_places(arch, expected):
    assert softmax_blocks(arch) == expected


def test_time_per_token_needs_a_logged_rate():
    assert train_us_per_token(run("a-s0", "A D", 1, 1, 4.0)) == pytest.approx(1e6 / (4 * 4096))
    assert train_us_per_token(run("a-s0", "A D", 1, 1, None)) is None


def test_cost_lines_read_each_searchs_table(tmp_path):
    """In dense blocks with the microseconds beside them; a table of format 1 (the pinned
    studies') in microseconds alone."""
    searches = [run(name, "norm D relative D", 1, 1) for name in ("search-s0", "search-s1")]
    shape = {"batch_size": 16, "seq_len": 256, "backend": "tensorflow", "machine": "cpu"}
    tables = {
        "search-s0": {"format_version": 2, "unit": "dense", "costs": {"dense": 1.0, "norm": 3.5},
                      "microseconds": {"dense": 0.92, "norm": 3.22}, **shape},
        "search-s1": {"format_version": 1, "costs": {"relative": 5.19, "norm": 3.22}, **shape},
    }  # fmt: skip
    for name, table in tables.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "cost_table.json").write_text(json.dumps(table))
    lines = cost_lines([*searches, ROWS[0].runs[0]], lambda name: tmp_path / name)
    assert lines == [
        "- search-s0: dense 1, norm 3.5 (dense blocks; us/token dense 0.92, norm 3.22; "
        "forward and backward, batch 16 x 256, tensorflow on cpu)",
        "- search-s1: norm 3.22, relative 5.19 (us/token; forward and backward, batch "
        "16 x 256, tensorflow on cpu)",
    ]


def test_the_plot_is_drawn_for_recall_runs_only(tmp_path):
    assert recall_plot(ROWS, tmp_path / "recall.png", "t", ["softmax", "soft4"], [])
    assert (tmp_path / "recall.png").stat().st_size > 0
    assert not recall_plot(ROWS[2:], tmp_path / "none.png", "t", [], [])


def test_side_by_side_times_are_used_only_when_every_recall_run_has_one():
    """A run's logged rate depends on what shared the machine with it; study_speed.py's
    figures are one machine and load for all, so the table takes them, but only when
    every recall run has one (the two never mix in one column)."""
    rows = [ArmRow(r.arm, 3, [r]) for r in (run("a-s0", "A D", 1, 1), run("b-s0", "A D", 1, 1))]
    rows[0].runs[0].speed = {"train_tokens_per_second": 50_000.0}
    assert not side_by_side(rows)
    assert "(own run)" in recall_table(rows)[0]
    rows[1].runs[0].speed = {"train_tokens_per_second": 25_000.0}
    assert side_by_side(rows)
    lines = recall_table(rows)
    assert "(side by side)" in lines[0]
    cells = {line.split("|")[1].strip(): line.split("|")[5].strip() for line in lines[2:]}
    assert cells == {"a": f"{1e6 / 50_000:.2f}", "b": f"{1e6 / 25_000:.2f}"}
