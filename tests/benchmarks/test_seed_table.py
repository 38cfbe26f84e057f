"""benchmarks/seed_table.py: reading the runs' logs back into the side-by-side table,
without training."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "seed_table.py"


@pytest.fixture(scope="module")
def seed_table():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("seed_table_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(out: Path, run: str, lines: list[str]) -> None:
    log = out / "logs" / run / "training.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(lines) + "\n")


def start(at: str, step: int = 0) -> str:
    """A launch's first lines: the configuration, then the data (a later time)."""
    return (
        f'2026-11-26 {at},000 [INFO] configuration:\n{{\n  "model": {{}}\n}}\n'
        f"2026-11-26 {at},000 [INFO] 10 batches of 32x32 per epoch, 200 steps in all, "
        f"starting at step {step}"
    )


def validation(step: int, exact: float, original: float, at: str = "23:00:00", how="") -> str:
    return (
        f"2026-11-26 {at},000 [INFO] validation at step {step}{how}: loss 4.0000, "
        f"perplexity {exact:.2f} (original's figure {original:.2f}) in 15.0s"
    )


def test_epochs_are_read_back_resumed_steps_keep_their_last_figures(seed_table, tmp_path):
    write_run(
        tmp_path,
        "a_seed0",
        [
            start("22:58:20"),
            validation(10, 110.0, 111.0, "22:59:00"),
            validation(15, 99.0, 99.5, "23:00:00"),  # an --eval_every validation in epoch 2
            validation(20, 80.0, 81.0, "23:00:00"),
            "Traceback (a line without a time)",
            start("23:30:00", 20),  # resumed half an hour later
            validation(20, 79.0, 80.0, "23:30:50"),  # the same step scored again
        ],
    )
    write_run(tmp_path, "a_seed1", [start("23:00:00"), validation(10, 112.0, 113.0, "23:01:30")])
    reports = [seed_table.run_report(run, tmp_path) for run in ("a_seed0", "a_seed1")]
    assert reports[0]["epochs"] == {
        1: {"step": 10, "exact": 110.0, "original": 111.0, "weights": None},
        2: {"step": 20, "exact": 79.0, "original": 80.0, "weights": None},
    }
    # Each launch's first to last line: 100 s, then 50 s; the half hour between is not counted.
    assert reports[0]["seconds"] == 150.0 and reports[0]["test"] is None
    table = seed_table.markdown(reports, "test machine")
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line[:2] == "| "}
    # Epoch 1: the seed's 114.4, then each run's original's figure and exact figure.
    assert [c.strip() for c in rows["1"].split("|")[2:-1]] == [
        "114.40",
        "111.00",
        "110.00",
        "113.00",
        "112.00",
    ]
    assert "| 2 | - | 80.00 | 79.00 | - | - |" in table
    assert "machine: test machine" in table
    mean, sd = seed_table.spread(reports)[1]
    assert mean == pytest.approx(111.0) and sd == pytest.approx(2**0.5)
    assert 2 not in seed_table.spread(reports)  # one run reached epoch 2


def test_until_epoch_out_of_range_is_refused(seed_table, capsys):
    with pytest.raises(SystemExit) as exit_info:
        seed_table.main(["--until_epoch", "21"])
    assert exit_info.value.code == 2
    assert "--until_epoch must be between 1 and 20" in capsys.readouterr().err


def test_a_failed_run_stops_with_one_line_naming_its_output(seed_table, tmp_path, monkeypatch):
    """A partf-train run that exits with an error is reported, not read as finished."""

    class Failed:
        returncode = 1

        def __init__(self, *args, **kwargs):
            pass

        def poll(self):
            return self.returncode

    monkeypatch.setattr(seed_table.subprocess, "Popen", Failed)
    with pytest.raises(SystemExit, match=r"run a_seed0 failed \(exit 1\); see .*a_seed0\.out"):
        seed_table.train("a_seed0", 0, [], tmp_path, None)


def test_a_frozen_search_validated_with_expected_weights_is_read_and_marked(seed_table, tmp_path):
    frozen = " with expected block weights (pi frozen until step 100)"
    write_run(
        tmp_path,
        "par_seed0",
        [start("23:00:00"), validation(10, 150.0, 152.0, how=frozen), validation(20, 90.0, 91.0)],
    )
    report = seed_table.run_report("par_seed0", tmp_path)
    assert report["epochs"][1]["weights"] == "expected" and report["epochs"][2]["weights"] is None
    table = seed_table.markdown([report], "test machine")
    assert "| 1 | 114.40 | 152.00* | 150.00* |" in table
    assert "| 2 | - | 91.00 | 90.00 |" in table
    assert "*: validated with expected block weights" in table
