"""The one lookup of the reference data, and what its absence does."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.shared_data import (
    ROOT,
    SharedDataMissing,
    original_dir,
    require,
    shared_data_dir,
)
from tests.shared_data import absent


def test_lookup_prefers_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PARTF_SHARED_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path
    assert original_dir() == tmp_path / "par-transformer-xl-original"
    monkeypatch.delenv("PARTF_SHARED_DATA")
    assert shared_data_dir() == ROOT.parent / "shared" / "data"


def test_absent_data_skips_or_fails_when_required(monkeypatch):
    monkeypatch.delenv("PARTF_REQUIRE_SHARED_DATA", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no data here"):
        absent("no data here")
    monkeypatch.setenv("PARTF_REQUIRE_SHARED_DATA", "1")
    with pytest.raises(pytest.fail.Exception, match="PARTF_REQUIRE_SHARED_DATA=1 requires it"):
        absent("no data here")


def test_require_names_what_is_missing_and_how_to_point_at_it(tmp_path):
    assert require(tmp_path, "records") == tmp_path
    missing = tmp_path / "nothing"
    with pytest.raises(SharedDataMissing, match=r"records not found at .*nothing; set "):
        require(missing, "records", flag="--records")
    with pytest.raises(SharedDataMissing, match="or pass --records"):
        require(Path(missing), "records", flag="--records")
