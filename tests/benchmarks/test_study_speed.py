"""benchmarks/study_speed.py --per_architecture: runs are timed together exactly when they
built the same model at the same batch shape, whatever they learned or paid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def speed():
    return load_benchmark("study_speed")


def finished(tmp_path: Path, name: str, seq_len: int = 256, **model) -> Path:
    """A finished run's folder as partf-study leaves it; returns its .keras path."""
    folder = tmp_path / "runs" / name / "checkpoints" / name
    folder.mkdir(parents=True)
    config = {"d_model": 64, "architecture": "relative D relative D", "window": 16}
    config.update(model)
    results = {
        "data": {"batch_size": 4096 // seq_len, "seq_len": seq_len},
        "config": {"model": config, "training": {"seed": int(name[-1])}},
    }
    (folder / "results.json").write_text(json.dumps(results))
    (folder / f"{name}.keras").write_bytes(b"")
    return folder / f"{name}.keras"


def test_runs_are_grouped_by_the_model_they_built(speed, tmp_path):
    finished(tmp_path, "softmax-s0")
    finished(tmp_path, "softmax-s1")
    finished(tmp_path, "wo2-s0", architecture="local D relative D", tau_steps=2000)
    # Another seed, from scratch, longer: tau anneals over its 3,000 steps, not 2,000.
    finished(tmp_path, "w2-s1", architecture="local D relative D", tau_steps=3000)
    finished(tmp_path, "wide-s0", d_model=128)
    finished(tmp_path, "window8-s0", window=8)
    finished(tmp_path, "long-s0", seq_len=1024)
    # A search's measured prices and their weight differ run by run; its model does not.
    finished(tmp_path, "search-s0", architecture="relative|local D", candidate_costs={"local": 3})
    finished(
        tmp_path,
        "search-s1",
        architecture="relative|local D",
        candidate_costs={"local": 4},
        search_cost_weight=0.1,
    )
    runs = speed.finished_runs(tmp_path, None)
    groups = speed.group_by_structure(runs)
    assert sorted(map(sorted, groups.values())) == sorted(
        [
            ["softmax-s0", "softmax-s1"],
            ["w2-s1", "wo2-s0"],
            ["wide-s0"],
            ["window8-s0"],
            ["long-s0"],
            ["search-s0", "search-s1"],
        ]
    )
    for first, members in groups.items():
        assert first == members[0] and first in members  # the timed run is its group's first
