"""partf-study's command line: each mistake is one line with the fix and exit status 2,
answered before anything is built or trained (and nothing is written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from partf.cli.study import main

TINY = str(Path(__file__).resolve().parents[2] / "studies" / "tiny.toml")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["missing.toml"], "does not exist; give a TOML file"),
        ([TINY, "--arms", "nope"], "--arms nope is not in the plan; its arms: conv, par, txl."),
        ([TINY, "--seeds", "7"], "--seeds 7 is not in the plan; its seeds: [0, 1]."),
        ([TINY, "--workers", "0"], "--workers must be 1 or more, not 0."),
        ([TINY, "--report"], "holds no study yet; run partf-study"),
    ],
)
def test_mistakes_exit_2_with_one_line_and_write_nothing(argv, expected, tmp_path, capsys):
    out = tmp_path / "study"
    assert main([*argv, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("partf-study: error: ")
    assert expected in lines[0]
    assert not out.exists()
