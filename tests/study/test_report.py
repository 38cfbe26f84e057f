"""The study report: the decision rule read from pi's scalars, means and ranges, and one
table per backend and machine, from runs written by hand (no training here)."""

from __future__ import annotations

import json

import pytest

from partf.study.paths import StudyPaths
from partf.study.plan import load_plan
from partf.study.records import decided_step, event_scalars
from partf.study.report import RunRecord, spread, wall_line, write_report
from tests.study.fake_runs import PLAN, fake_run


def pi_scalars(frames: dict[int, list[list[float]]], names=("A", "D")) -> dict:
    """TensorBoard-like pi/block_<i>/<name> scalars from {step: pi}."""
    found: dict = {}
    for step, pi in sorted(frames.items()):
        for block, row in enumerate(pi):
            for name, value in zip(names, row, strict=True):
                found.setdefault(f"pi/block_{block}/{name}", []).append((step, value))
    return found


def test_a_search_decides_from_the_first_step_after_which_pi_stays_settled():
    frames = {
        10: [[0.5, 0.5], [0.5, 0.5]],
        20: [[0.95, 0.05], [0.3, 0.7]],  # block 1 not at 0.9 yet
        30: [[0.95, 0.05], [0.05, 0.95]],  # both settled on their final argmax
        40: [[0.91, 0.09], [0.02, 0.98]],
    }
    assert decided_step(pi_scalars(frames)) == 30
    # A block that dips under 0.9 later starts the count again.
    frames[40] = [[0.85, 0.15], [0.02, 0.98]]
    frames[50] = [[0.97, 0.03], [0.02, 0.98]]
    assert decided_step(pi_scalars(frames)) == 50
    # An argmax that changes after reaching 0.9 was not the decision.
    frames = {10: [[0.95, 0.05]], 20: [[0.05, 0.95]]}
    assert decided_step(pi_scalars(frames)) == 20
    # Never settled, or a fixed model (one candidate): no decision.
    assert decided_step(pi_scalars({10: [[0.6, 0.4]]})) is None
    assert decided_step(pi_scalars({10: [[1.0]]}, names=("A",))) is None


def test_spread():
    assert spread([]) == "-"
    assert spread([2.0]) == "2.00"
    assert spread([1.0, 2.0, 6.0]) == "3.00 (1.00-6.00)"


def test_event_scalars_reads_what_tensorflow_writes(tmp_path):
    tf = pytest.importorskip("tensorflow")
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for step in (1, 2):
            tf.summary.scalar("pi/block_0/A", 0.25 * step, step=step)
    writer.flush()
    assert event_scalars(tmp_path) == {"pi/block_0/A": [(1, 0.25), (2, 0.5)]}
    assert event_scalars(tmp_path / "absent") == {}


def test_the_report_separates_backends_and_compares_with_the_reference(tmp_path):
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    plan = load_plan(plan_file)
    paths = StudyPaths(tmp_path / "out")
    fake_run(paths, "txl-s0", 40.0, 3e6, ["jax"])
    fake_run(paths, "txl-s1", 42.0, 3e6, ["jax"])
    fake_run(paths, "par-s0", 44.1, 2e6, ["jax"])
    fake_run(paths, "par-stage2-s0", 41.0, 2e6, ["jax", "tensorflow"])  # resumed elsewhere
    report = write_report(plan, paths).read_text()
    jax, mixed = (
        report.split("## jax on m")[1],
        report.split("## mixed: jax + tensorflow on m, commit unknown"),
    )
    assert len(mixed) == 2
    txl = next(line for line in jax.splitlines() if line.startswith("| **txl**"))
    par = next(line for line in jax.splitlines() if line.startswith("| par |"))
    assert "| 2/2 | 41.00 (40.00-42.00) | +0.0% |" in txl
    assert "| 1/2 | 44.10 | +7.6% | 43.10 | +7.8% |" in par
    assert "| 2.000 | -33.3% |" in par
    # The stage 2 resumed on another backend is not compared in the jax table.
    assert "par-stage2" not in jax.split("## mixed")[0]
    assert "No record yet (2): par-s1, par-stage2-s1." in report
    assert (paths.out / "pareto.png").is_file() and (paths.out / "pareto-2.png").is_file()
    assert "recall accuracy" not in report  # no run answered MQAR


def test_runs_that_answered_mqar_show_their_recall_accuracy_beside_perplexity(tmp_path):
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    paths = StudyPaths(tmp_path / "out")
    fake_run(paths, "txl-s0", 40.0, 3e6, ["jax"], recall=0.5)
    fake_run(paths, "txl-s1", 42.0, 3e6, ["jax"], recall=0.25)
    fake_run(paths, "par-s0", 44.1, 2e6, ["jax"])  # a run without a recall split
    report = write_report(load_plan(plan_file), paths).read_text()
    header = next(line for line in report.splitlines() if line.startswith("| arm"))
    assert header.startswith(
        "| arm | seeds | valid ppl | vs ref | test ppl | vs ref | recall accuracy % | architectures"
    )
    rule = report.splitlines()[report.splitlines().index(header) + 1]
    assert rule.count("|") == header.count("|")
    txl = next(line for line in report.splitlines() if line.startswith("| **txl**"))
    par = next(line for line in report.splitlines() if line.startswith("| par |"))
    # The mean and range of its runs' accuracy, in %, after the test perplexity.
    assert "| 40.00 (39.00-41.00) | +0.0% | 37.50 (25.00-50.00) | `A D`" in txl
    assert "| 44.10 | +7.6% | 43.10 | +7.8% | - | `A D` (undecided) |" in par
    assert "'recall accuracy %': the answers of the [mqar] test split" in report


CONVERSION_PLAN = """
seeds = [0]
reference = "txl"
[data]
train = "records/train"
[arms]
txl = "--architecture='A D A D'"
small = { flags = "--architecture='A D'", control = true }
tiny = { flags = "--architecture='D'", control = true }
conv = { init_from = "txl", flags = "--drop_attention=1", matched = "conv_ft" }
conv_ft = { init_from = "txl", flags = "" }
par = "--search=par"
"""


def test_the_report_compares_with_the_hand_made_front_and_sums_training(tmp_path, monkeypatch):
    """The front is the best control (or the reference) at or below an arm's FLOPs; a
    conversion is also compared with its training-matched arm, and drawn as a triangle
    with an arrow from it; its training compute includes the run it started from."""
    from matplotlib.axes import Axes

    drawn, arrows = {}, []
    errorbar, annotate = Axes.errorbar, Axes.annotate

    def spy_errorbar(self, x, y, *args, **kwargs):
        drawn[kwargs["label"]] = (kwargs["fmt"], x, y)
        return errorbar(self, x, y, *args, **kwargs)

    def spy_annotate(self, text, xy, xytext=None, **kwargs):
        arrows.append((xytext, xy))
        return annotate(self, text, xy, xytext=xytext, **kwargs)

    monkeypatch.setattr(Axes, "errorbar", spy_errorbar)
    monkeypatch.setattr(Axes, "annotate", spy_annotate)
    steps = {}
    step = Axes.step

    def spy_step(self, x, y, *args, **kwargs):
        steps[kwargs["label"]] = list(y)
        return step(self, x, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "step", spy_step)

    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(CONVERSION_PLAN)
    plan = load_plan(plan_file)
    paths = StudyPaths(tmp_path / "out")
    for name, valid, flops, trained in (
        ("txl-s0", 40.0, 3e6, 5e12),
        ("small-s0", 44.0, 2e6, 3e12),
        ("tiny-s0", 60.0, 1e6, 1e12),
        ("conv-s0", 42.0, 2.5e6, 1e12),
        ("conv_ft-s0", 38.0, 3e6, 1e12),
        ("par-s0", 41.0, 3e6, 6e12),
    ):
        fake_run(paths, name, valid, flops, ["jax"])
        path = paths.checkpoints(name) / "results.json"
        results = json.loads(path.read_text())
        results["train_flops"] = {"total": trained}
        path.write_text(json.dumps(results))
    speed = {
        "train_tokens_per_second": 1500.0,
        "eval_ms_per_batch": 4.25,
        "generate_ms_per_token": 2.0,
    }
    (paths.out / "speed.json").write_text(json.dumps({"runs": {"conv-s0": speed}}))
    report = write_report(plan, paths).read_text()
    rows = {line.split("|")[1].strip(): line for line in report.splitlines() if "|" in line}
    conv = [cell.strip() for cell in rows["conv"].split("|")]
    # benchmarks/study_speed.py's side-by-side figures, where measured.
    assert conv[16:19] == ["1500", "4.2", "2.0"]
    txl = [c.strip() for c in rows["**txl** (reference)"].split("|")]
    assert txl[16] == "-"
    # Against the same fine-tune with nothing removed (conv_ft, 38.0): +10.5%. Against
    # the front, each model against the one trained as long: 42/38 over the best control
    # at or below 2.5 MFLOPs against the reference (small, 44/40): +0.5%. Read
    # absolutely (42 against 44, -4.5%) conv's extra training would count as a win.
    assert conv[12] == "+10.5%"
    assert conv[11] == "+0.5%"
    assert txl[12] == "-"  # no matched arm
    # conv_ft trained longer than the front and matches nothing: no front comparison.
    assert [c.strip() for c in rows["conv_ft"].split("|")][11] == "-"
    # The reference is on the front too: par, at its FLOPs, is compared with it.
    assert [c.strip() for c in rows["par"].split("|")][11] == "+2.5%"
    assert txl[11] == "-"
    assert conv[13] == "6.0"  # 1 + 5 TFLOPs: the txl it started from counted
    assert [c.strip() for c in rows["small (hand-made)"].split("|")][11] == "-"
    # The plot: conversions (conv_ft too: it also starts from txl) are triangles, the
    # models trained from scratch are not, and an arrow runs from conv_ft to conv.
    assert drawn["conv (n=1, from txl)"] == ("^", 2.5, 42.0)
    assert drawn["conv_ft (n=1, from txl)"][0] == "^"
    assert drawn["small (n=1)"][0] == "D" and drawn["txl (n=1)"][0] == "s"
    assert arrows == [((3.0, 38.0), (2.5, 42.0))]
    # The front (txl 40 at 3, small 44 at 2, tiny 60 at 1 MFLOPs) and the same scaled by
    # conv_ft over txl (38/40), the line conv lies 0.5% above.
    assert steps["hand-made front"] == [60.0, 44.0, 40.0, 40.0]
    assert steps["hand-made front x conv_ft/txl (0.950)"] == pytest.approx([57.0, 41.8, 38.0, 38.0])


def test_each_tables_wall_time_is_summed_per_seed():
    runs = [
        RunRecord(name, name[:-3], int(name[-1]), "t", {"wall_time_seconds": wall})
        for name, wall in (("txl-s0", 3600.0), ("par-s0", 1800.0), ("txl-s1", 900.0))
    ]
    runs.append(RunRecord("par-s1", "par", 1, "t", {}))  # no wall time: left out
    assert wall_line(runs) == (
        "Wall time of the runs, summed per seed: seed 0 1.50 h (2 runs), seed 1 0.25 h (1 run)."
    )
    assert wall_line(runs[3:]) == ""
