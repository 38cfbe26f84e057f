"""Writes partf/data/wikitext2/wikitext-2.tar.xz, the copy of WikiText-2 partf ships, from a
folder holding the three published splits as train.txt, valid.txt and test.txt.

Usage:

    python scripts/pack_wikitext2.py FOLDER [ARCHIVE]

Each file is checked against its sha256 (partf.data.download.WIKITEXT2_CHECKSUMS) before
it is packed, and the archive is reproducible: members in a fixed order, flat names, no
owner, a fixed date, xz preset 9e. Standard library and partf.data.download only.
"""

from __future__ import annotations

import lzma
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from partf.data.download import SPLIT_FILES, WIKITEXT2_CHECKSUMS, verify_file  # noqa: E402
from partf.data.shipped import SHIPPED_WIKITEXT2  # noqa: E402

# 2016-09-26, the day "Pointer Sentinel Mixture Models" was posted; any fixed date will do.
MTIME = 1474848000


def pack(folder: Path, archive: Path) -> Path:
    for name in SPLIT_FILES:
        if not verify_file(folder / name, WIKITEXT2_CHECKSUMS[name]):
            raise SystemExit(f"pack_wikitext2.py: error: {folder / name} is not the published file")
    part = archive.with_name(f".{archive.name}.part")
    with (
        lzma.open(part, "wb", preset=9 | lzma.PRESET_EXTREME) as xz,
        tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name in SPLIT_FILES:
            info = tarfile.TarInfo(name)
            info.size = (folder / name).stat().st_size
            info.mtime, info.mode = MTIME, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(folder / name, "rb") as f:
                tar.addfile(info, f)
    part.replace(archive)
    return archive


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__.strip())
    out = pack(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else SHIPPED_WIKITEXT2)
    print(f"{out}: {out.stat().st_size:,} bytes")
