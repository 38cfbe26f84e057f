"""benchmarks/listops.py: its flags, the one-line refusals and the table, without training."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_benchmark
from tests.models.test_encoder import partf_noncausal_names


@pytest.fixture(scope="module")
def listops():
    return load_benchmark("listops")


def test_defaults_follow_lra_and_cover_every_noncausal_mechanism(listops):
    args = listops.parse_args([])
    assert (args.max_len, args.min_len, args.max_depth) == (2000, 500, 10)
    assert sorted(args.mechanisms) == partf_noncausal_names()
    assert args.d_ffn == 2 * args.d_model and args.warmup_steps == args.steps // 10


def test_refusals_are_one_line(listops, tmp_path):
    flags = ["--out", str(tmp_path), "--steps", "2"]
    with pytest.raises(SystemExit, match="--max_positions 1024") as error:
        listops.main([*flags, "--position", "learned", "--max_positions", "1024"])
    assert "\n" not in str(error.value) and str(error.value).startswith("listops.py: error:")
    with pytest.raises(SystemExit, match="no non-causal form: primal"):
        listops.main([*flags, "--mechanisms", "softmax", "primal"])
    assert not list(tmp_path.iterdir())  # refused before writing any record


def test_table_lists_runs_failures_and_published_figures(listops):
    args = listops.parse_args(["--steps", "10", "--max_len", "64"])
    runs = [
        {"mechanism": "softmax", "test_accuracy": 0.25, "steps_per_s": 3.5,
         "peak_rss_mib": 1500.0, "rss_before_model_mib": 700.0, "parameters": 1234},
        {"mechanism": "eva", "error": "ValueError: something"},
    ]  # fmt: skip
    lines = listops.table(args, runs).splitlines()
    assert lines[4] == "| softmax | 25.0% | 3.50 | 1,500 (700) | 1,234 | Transformer 36.4% |"
    assert lines[5].startswith("| eva | failed: ValueError: something |")
