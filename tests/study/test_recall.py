"""The recall part of a study's report: accuracy means and spreads, the softmax places of
each architecture, measured time per token, each search's prices, and the plot."""

from __future__ import annotations

import statistics

import pytest

from partf.study.recall import (
    MARKERS,
    cost_lines,
    kind_of,
    placement_table,
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
    record = RunRecord(name, name.rsplit("-s", 1)[0], 0, "tf on m", results)
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


def test_cost_lines_read_each_searchs_table():
    """In dense blocks with the microseconds beside them; a table of format 1 (the pinned
    studies') in microseconds alone."""
    searches = [run(name, "norm D relative D", 1, 1) for name in ("search-s0", "search-s1")]
    shape = {"batch_size": 16, "seq_len": 256, "backend": "tensorflow", "machine": "cpu"}
    tables = {
        "search-s0": {"format_version": 2, "unit": "dense", "costs": {"dense": 1.0, "norm": 3.5},
                      "microseconds": {"dense": 0.92, "norm": 3.22}, **shape},
        "search-s1": {"format_version": 1, "costs": {"relative": 5.19, "norm": 3.22}, **shape},
    }  # fmt: skip
    for search in searches:
        search.cost_table = tables[search.name]
    lines = cost_lines([*searches, ROWS[0].runs[0]])
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


def test_conversions_are_their_own_kind_unless_they_search():
    """A fixed conversion of a trained run (init_from) is marked apart from the placements
    trained from scratch; a search or stage 2 that started from a trained run stays a search."""
    conversions = ["wo2", "wconv", "wconv-stage2"]
    kinds = {
        arm: kind_of(arm, ["softmax", "w2"], ["wconv"], conversions)
        for arm in ("softmax", "w2", "wo2", "wconv", "wconv-stage2", "probe")
    }
    assert kinds == {
        "softmax": "control",
        "w2": "control",
        "wo2": "converted",
        "wconv": "search",
        "wconv-stage2": "stage2",
        "probe": "other",
    }
    assert len({MARKERS[kind] for kind in kinds.values()}) == 5  # each kind drawn apart


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


def seeded(name: str, arch: str, test: float, source=None):
    record = run(name, arch, test, test)
    record.seed = int(name.rsplit("-s", 1)[1])
    record.source = source
    return record


def test_placements_of_one_count_are_averaged_per_seed_over_common_seeds():
    soft = "relative D relative D relative D relative D"
    places = {
        "p12": "relative D relative D norm D norm D",
        "p34": "norm D norm D relative D relative D",
    }
    scores = {("p12", 0): 1.0, ("p12", 1): 0.9, ("p12", 2): 0.8, ("p34", 0): 0.2, ("p34", 1): 0.1}
    rows = [
        ArmRow(arm, 3, [seeded(f"{arm}-s{s}", arch, v) for (a, s), v in scores.items() if a == arm])
        for arm, arch in places.items()
    ]
    source = seeded("softmax-s0", soft, 1.0)
    rows += [
        ArmRow("softmax", 3, [source]),  # every place softmax: no placement to choose
        ArmRow("c12", 3, [seeded("c12-s0", places["p12"], 0.7, source)]),  # converted, alone
        ArmRow("one", 3, [seeded("one-s0", "relative D norm D norm D norm D", 0.5)]),  # alone
    ]
    lines = placement_table(rows)
    assert len(lines) == 3  # header, separator, one set: p12 and p34 from scratch
    cells = [c.strip() for c in lines[2].split("|")]
    means = [100 * (1.0 + 0.2) / 2, 100 * (0.9 + 0.1) / 2]  # seed 2: p34 has not finished
    assert cells[1:4] == ["2 of 4 (8 blocks), norm beside", "from scratch", "2 of 6: p12, p34"]
    assert cells[4] == f"s0 {means[0]:.1f}, s1 {means[1]:.1f}"
    assert cells[5] == f"{statistics.fmean(means):.1f} ({min(means):.1f}-{max(means):.1f})"


def test_converted_placements_form_their_own_set_and_a_full_set_says_all():
    source = seeded("softmax-s0", "relative D relative D", 1.0)
    archs = {"a": "relative D norm D", "b": "norm D relative D"}
    rows = [ArmRow(arm, 1, [seeded(f"{arm}-s0", arch, 0.5, source)]) for arm, arch in archs.items()]
    rows.append(ArmRow("s", 1, [seeded("s-s0", "relative D norm D", 0.3)]))  # from scratch
    lines = placement_table(rows)
    assert len(lines) == 3
    assert [c.strip() for c in lines[2].split("|")][1:4] == [
        "1 of 2 (4 blocks), norm beside",
        "converted",
        "all: a, b",
    ]


def test_placements_beside_other_mixers_or_chosen_by_selection_are_kept_apart():
    """One softmax place beside window 16 and beside norm are two sets; a run whose
    architecture the training-free selection chose is no fixed placement, even where it
    chose one that a fixed arm has (it would take that arm's place in the set)."""
    source = seeded("softmax-s0", "relative D relative D", 1.0)
    archs = {
        "wo1": "relative D local D",
        "wo2": "local D relative D",
        "o1": "relative D norm D",
        "o2": "norm D relative D",
    }
    rows = [ArmRow(arm, 1, [seeded(f"{arm}-s0", arch, 0.5, source)]) for arm, arch in archs.items()]
    selected = seeded("wsel1-s0", "local D relative D", 0.1, source)
    selected.results["config"] = {"training": {"drop_attention": 1}}
    rows.append(ArmRow("wsel1", 1, [selected]))
    lines = placement_table(rows)
    sets = [[c.strip() for c in line.split("|")][1:4] for line in lines[2:]]
    assert sets == [
        ["1 of 2 (4 blocks), local beside", "converted", "all: wo1, wo2"],
        ["1 of 2 (4 blocks), norm beside", "converted", "all: o1, o2"],
    ]


def test_runs_of_several_machines_are_timed_against_their_seeds_reference():
    """Where a table's seeds come from different machines, a microsecond of one CPU is not
    one of another: each run's time is given over the reference run of its own seed (the
    same machine), and one machine's table keeps microseconds."""
    rows = []
    for arm, rates in (("softmax", (2.0, 8.0)), ("w2", (4.0, 8.0))):
        runs = []
        for seed, (machine, rate) in enumerate(zip(("slow", "fast"), rates, strict=True)):
            record = run(f"{arm}-s{seed}", "relative D", 1.0, 1.0, rate)
            record.seed, record.machine = seed, machine
            runs.append(record)
        rows.append(ArmRow(arm, 2, runs))
    lines = recall_table(rows, "softmax")
    assert "| train time x softmax of its seed (own run) |" in lines[0]
    cells = {line.split("|")[1].strip(): line.split("|")[5].strip() for line in lines[2:]}
    # w2: seed 0 twice as fast as seed 0's softmax (0.5), seed 1 as fast (1.0)
    assert cells == {"softmax": "1.00 (1.00-1.00)", "w2": "0.75 (0.50-1.00)"}
    for row in rows:
        for record in row.runs:
            record.machine = "one"
    assert "| train us/token (own run) |" in recall_table(rows, "softmax")[0]
