"""Where the reference data lives: the one lookup that tests and benchmarks share.

The folder holds WikiText-2's train, valid and test text (`wikitext-2/`, all three
splits: the real data set, not a stand-in) and the original project's records and
tokenizer (`par-transformer-xl-original/`). It is looked up as
`$PARTF_SHARED_DATA` when that is set, else `../shared/data` beside the checkout.
Users do not have it: tests skip without it, unless `PARTF_REQUIRE_SHARED_DATA=1`
(CI sets it where the folder exists), which turns the skip into a failure; benchmarks
stop with a one-line error naming what is missing.

Standard library only, so a benchmark can import it before TensorFlow.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The original project's artifacts, under the shared folder.
ORIGINAL_NAME = "par-transformer-xl-original"
#: WikiText-2's three splits, under the shared folder.
WIKITEXT2_NAME = "wikitext-2"


def shared_data_dir() -> Path:
    """$PARTF_SHARED_DATA, else ../shared/data beside the checkout (it may not exist)."""
    configured = os.environ.get("PARTF_SHARED_DATA")
    return Path(configured) if configured else ROOT.parent / "shared" / "data"


def wikitext2_dir() -> Path:
    """WikiText-2's train.txt, valid.txt and test.txt inside the shared folder."""
    return shared_data_dir() / WIKITEXT2_NAME


def original_dir() -> Path:
    """The original project's records and tokenizer inside the shared folder."""
    return shared_data_dir() / ORIGINAL_NAME


def data_required() -> bool:
    """True when PARTF_REQUIRE_SHARED_DATA=1: missing reference data is an error."""
    return os.environ.get("PARTF_REQUIRE_SHARED_DATA", "") == "1"


class SharedDataMissing(FileNotFoundError):
    """A benchmark's default data is not there."""


def require(path: Path, what: str, flag: str | None = None) -> Path:
    """`path` if it exists, else `SharedDataMissing` with a message that says how to
    point at the data (`flag`: the benchmark's option that takes it instead)."""
    if path.exists():
        return path
    instead = f", or pass {flag}" if flag else ""
    raise SharedDataMissing(
        f"{what} not found at {path}; set PARTF_SHARED_DATA to the folder that holds "
        f"{ORIGINAL_NAME}/ and wikitext-2/{instead}"
    )
