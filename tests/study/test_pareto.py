"""The hand-made front of a study's report (`partf.study.pareto`): the controls' and the
reference's means that no other beats, read as a step at an arm's FLOPs, and the plot."""

from __future__ import annotations

from partf.study.pareto import front_at, front_points, pareto_plot
from partf.study.report import ArmRow, RunRecord


def row(arm: str, *runs: tuple[float, float] | None) -> ArmRow:
    """An arm whose runs have (FLOPs per token, validation perplexity); None: unfinished."""
    records = []
    for seed, figures in enumerate(runs):
        results = None
        if figures is not None:
            flops, valid = figures
            results = {"flops_per_token": {"total": flops}, "valid": {"perplexity": valid}}
        records.append(RunRecord(f"{arm}-s{seed}", arm, seed, "jax on m", results))
    return ArmRow(arm, len(runs), records)


ROWS = [
    row("txl", (3e6, 40.0), (3e6, 42.0)),  # the reference: mean 41
    row("small", (2e6, 44.0)),
    row("tiny", (1e6, 60.0)),
    row("big", (4e6, 45.0)),  # a control beaten by the cheaper reference
    row("par", (1.5e6, 30.0)),  # not a control: never on the front
    row("pending", None),
]
CONTROLS = ("small", "tiny", "big", "pending")


def test_the_front_is_the_controls_and_reference_no_cheaper_one_beats():
    assert front_points(ROWS, CONTROLS, "txl") == [(1e6, 60.0), (2e6, 44.0), (3e6, 41.0)]
    assert front_points(ROWS, CONTROLS, None) == [(1e6, 60.0), (2e6, 44.0)]


def test_the_front_at_a_cost_is_the_best_point_at_or_below_it():
    assert front_at([(1e6, 60.0), (2e6, 44.0)], 0.5e6) is None
    assert front_at([(1e6, 60.0), (2e6, 44.0)], 1.5e6) == 60.0
    assert front_at([(1e6, 60.0), (2e6, 44.0)], 2e6) == 44.0
    assert front_at([(1e6, 60.0)], None) is None


def test_the_plot_is_written_whole_and_only_with_a_finished_run(tmp_path):
    path = tmp_path / "pareto.png"
    assert not pareto_plot([row("pending", None)], "txl", path, "nothing yet")
    assert not path.exists()
    assert pareto_plot(ROWS, "txl", path, "a study", controls=CONTROLS)
    assert path.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pareto.png"]
