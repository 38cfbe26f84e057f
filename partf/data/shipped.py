"""The copy of WikiText-2 partf ships, and `get_wikitext2`, what `--source=wikitext-2` runs.

`partf/data/wikitext2/wikitext-2.tar.xz` holds WikiText-2's three published splits byte
for byte (CC BY-SA 3.0: the folder's README.md; scripts/pack_wikitext2.py writes it), as
package data, so WikiText-2 needs no network. `get_wikitext2` keeps splits already in
place that match their sha256, else unpacks this copy, else (no file) downloads them.
Unpacking goes member by member into a temporary folder (member names never become
paths; only regular files), and renames the three files into place only when all match.
A damaged copy is refused in one line naming the file and how to restore it, and is not
replaced by a download: a damaged file of partf's own is to be restored, not routed
around.
"""

from __future__ import annotations

import contextlib
import logging
import lzma
import os
import shutil
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from partf.data.download import (
    SPLIT_FILES,
    WIKITEXT2_CHECKSUMS,
    WIKITEXT2_SOURCES,
    fetch_wikitext2,
    verify_file,
)
from partf.errors import DataError

logger = logging.getLogger(__name__)

SHIPPED_WIKITEXT2 = Path(__file__).resolve().parent / "wikitext2" / "wikitext-2.tar.xz"

_CHUNK = 1 << 20


def get_wikitext2(
    dest_dir: str | os.PathLike,
    archive: str | os.PathLike | None = None,
    sources: Iterable[str] = WIKITEXT2_SOURCES,
    checksums: Mapping[str, str] = WIKITEXT2_CHECKSUMS,
    timeout: float = 30.0,
) -> dict[str, Path]:
    """Makes `dest_dir/{train,valid,test}.txt` hold the verified WikiText-2 splits and
    returns {name: path}: kept when already there and matching, else unpacked from
    `archive` (default SHIPPED_WIKITEXT2), else, where that file is absent, downloaded
    from `sources`. DataError (one line) for a damaged archive or a failed download."""
    dest_dir = Path(dest_dir)
    archive = Path(SHIPPED_WIKITEXT2 if archive is None else archive)
    if all(verify_file(dest_dir / name, checksums[name]) for name in SPLIT_FILES):
        logger.info("WikiText-2 is already in %s and matches its checksums", dest_dir)
        return {name: dest_dir / name for name in SPLIT_FILES}
    if archive.is_file():
        return unpack_wikitext2(archive, dest_dir, checksums)
    logger.info("partf's copy of WikiText-2 (%s) is absent: downloading it", archive)
    return fetch_wikitext2(dest_dir, sources, checksums, timeout)


def unpack_wikitext2(
    archive: str | os.PathLike,
    dest_dir: str | os.PathLike,
    checksums: Mapping[str, str] = WIKITEXT2_CHECKSUMS,
) -> dict[str, Path]:
    """Unpacks train.txt, valid.txt and test.txt from the tar.xz `archive` into
    `dest_dir`, through a temporary folder beside it, renamed into place only when all
    three match `checksums`; files of `dest_dir` other than these three are left alone.
    DataError naming the archive and the fix when it is corrupt, truncated or incomplete;
    nothing is left behind then, not even a folder made for it."""
    archive, dest_dir = Path(archive), Path(dest_dir)
    parent = dest_dir.parent
    created = [p for p in (parent, *parent.parents) if not p.exists()]
    parent.mkdir(parents=True, exist_ok=True)
    staging = parent / f".{dest_dir.name}.unpack-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    logger.info("unpacking WikiText-2 from %s", archive)
    try:
        try:
            _extract(archive, staging)
        except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
            raise _damaged(archive, f"it cannot be read: {e}") from None
        for name in SPLIT_FILES:
            if not (staging / name).is_file():
                raise _damaged(archive, f"it holds no {name}")
            if not verify_file(staging / name, checksums[name]):
                raise _damaged(archive, f"sha256 of {name} does not match")
        if dest_dir.exists():
            for name in SPLIT_FILES:
                os.replace(staging / name, dest_dir / name)
        else:
            os.rename(staging, dest_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty
        raise
    shutil.rmtree(staging, ignore_errors=True)
    logger.info("WikiText-2 is in %s (checksums verified)", dest_dir)
    return {name: dest_dir / name for name in SPLIT_FILES}


def _extract(archive: Path, staging: Path) -> None:
    """Copies the regular-file members named (in whatever folder) train.txt, valid.txt or
    test.txt into `staging`, by our own names; the first of each name wins."""
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            if not member.isfile() or name not in SPLIT_FILES or (staging / name).exists():
                continue
            source = tar.extractfile(member)
            with source, open(staging / name, "wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)


def _damaged(archive: Path, why: str) -> DataError:
    return DataError(
        f"{_shown(archive)} is corrupt or truncated ({why}); restore it with "
        f"{_restore_command(archive)}, or point DATA_DIR at a folder with train.txt, "
        f"valid.txt and test.txt"
    )


def _shown(path: Path) -> str:
    """`path` relative to the working folder when it is inside it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def _restore_command(archive: Path) -> str:
    """`git checkout -- <archive>` in a checkout, else a reinstall of partf."""
    archive = archive.resolve()
    root = next((p for p in archive.parents if (p / ".git").exists()), None)
    if root is None:
        return "pip install --force-reinstall --no-deps partf"
    inside = Path.cwd().resolve()
    if inside == root or root in inside.parents:
        return f"git checkout -- {os.path.relpath(archive, inside)}"
    return f"git -C {root} checkout -- {archive.relative_to(root)}"
