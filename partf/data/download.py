"""Fetching WikiText-2 (word level, v1) and checking every file against its checksum.

A source is a zip archive (URL or local path; the members `wiki.{train,valid,test}.tokens`
or `{train,valid,test}.txt`, in any folder) or a folder holding `train.txt`, `valid.txt`
and `test.txt` (URL ending in `/` or local path). `fetch_wikitext2` keeps the first
source whose three files all match their sha256, written under temporary names and
renamed at the end. Downloaded bytes are only hashed and copied: nothing is executed or
unpickled, and member names are never used as paths.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import logging
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from partf.errors import DataError

logger = logging.getLogger(__name__)

SPLIT_FILES = ("train.txt", "valid.txt", "test.txt")

# The public home of WikiText first, then mirrors. A mirror that serves
# different bytes is rejected by the checksums, so listing one is harmless.
WIKITEXT2_SOURCES = (
    "https://wikitext.smerity.com/wikitext-2-v1.zip",
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
    "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/",
)

# "algorithm:hexdigest" per split file. sha256 for all three: it is the stronger
# hash, and one algorithm means one read of each file. (train.txt's git blob id,
# 2d84b35af79e411d73ea7cae83c73964c6ac83b4, names the same bytes.)
WIKITEXT2_CHECKSUMS = {
    "train.txt": "sha256:9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
    "valid.txt": "sha256:f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "test.txt": "sha256:d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
}

# Names of the splits inside the official archive (wikitext-2/wiki.*.tokens).
_ARCHIVE_MEMBERS = {
    "train.txt": "wiki.train.tokens",
    "valid.txt": "wiki.valid.tokens",
    "test.txt": "wiki.test.tokens",
}

_ALGORITHMS = ("sha256", "git-blob-sha1")
_CHUNK = 1 << 20


def file_checksum(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """`algorithm:hexdigest` of a file; `algorithm` "sha256" or "git-blob-sha1" (what
    `git hash-object` prints: sha1 of `b"blob <size>\\0"` followed by the content)."""
    if algorithm == "sha256":
        digest = hashlib.sha256()
    elif algorithm == "git-blob-sha1":
        digest = hashlib.sha1()
        digest.update(b"blob %d\0" % os.path.getsize(path))
    else:
        raise ValueError(f"unknown checksum algorithm {algorithm!r}; use one of {_ALGORITHMS}")
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return f"{algorithm}:{digest.hexdigest()}"


def verify_file(path: str | os.PathLike, expected: str) -> bool:
    """True when the file exists and matches `expected` ("algorithm:hexdigest")."""
    algorithm, _, _ = expected.partition(":")
    if not Path(path).is_file():
        return False
    return file_checksum(path, algorithm) == expected.lower()


class _SourceFailed(Exception):
    """One source did not work; `network` tells whether it was unreachable."""

    def __init__(self, reason: str, network: bool = False):
        super().__init__(reason)
        self.network = network


def _is_url(source: str) -> bool:
    return urllib.parse.urlparse(source).scheme in ("http", "https", "file")


def download(url: str, dest: str | os.PathLike, timeout: float = 30.0) -> Path:
    """Streams `url` (http, https or file) to `dest` through `.<name>.part`, renamed at
    the end (a stale `.part` is overwritten, a failed one removed), so `dest` only ever
    holds a complete file. `timeout` is per connection and per read."""
    dest = Path(dest)
    scheme = urllib.parse.urlparse(url).scheme
    if scheme not in ("http", "https", "file"):
        raise ValueError(f"unsupported URL scheme in {url!r}; use https://, http:// or file://")
    part = dest.with_name(f".{dest.name}.part")
    request = urllib.request.Request(url, headers={"User-Agent": "partf"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(part, "wb") as f:
            total = int(response.headers.get("Content-Length") or 0)
            done, last_log = 0, time.monotonic()
            while chunk := response.read(_CHUNK):
                f.write(chunk)
                done += len(chunk)
                if time.monotonic() - last_log > 5.0:
                    last_log = time.monotonic()
                    of_total = f" of {total / 1e6:.1f} MB" if total else " MB"
                    logger.info("downloading %s: %.1f%s", url, done / 1e6, of_total)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return dest


def _fetch_to(source: str, dest: Path, timeout: float) -> None:
    """Copies a URL or local file to `dest`, turning failures into _SourceFailed."""
    try:
        if _is_url(source):
            download(source, dest, timeout=timeout)
        else:
            if not Path(source).is_file():
                raise _SourceFailed("not found")
            shutil.copyfile(source, dest)
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as e:
        if isinstance(e, urllib.error.HTTPError):
            raise _SourceFailed(f"HTTP {e.code}") from None
        reason = getattr(e, "reason", e)
        if isinstance(reason, OSError) and reason.errno == errno.ENOENT:
            raise _SourceFailed("not found") from None
        raise _SourceFailed(f"unreachable ({reason})", network=True) from None
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise _SourceFailed("not found") from None
        network = not isinstance(e, PermissionError)
        raise _SourceFailed(f"unreadable ({e})", network=network) from None


def _extract_archive(archive: Path, names: Iterable[str], staging: Path) -> dict[str, Path]:
    """Copies the split files out of a zip into `staging`, by our own file names."""
    try:
        with zipfile.ZipFile(archive) as zf:
            by_base = {}
            for info in zf.infolist():
                if not info.is_dir():
                    by_base.setdefault(info.filename.rsplit("/", 1)[-1], info)
            out = {}
            for name in names:
                info = by_base.get(_ARCHIVE_MEMBERS.get(name, name)) or by_base.get(name)
                if info is None:
                    raise _SourceFailed(f"archive has no {_ARCHIVE_MEMBERS.get(name, name)}")
                out[name] = staging / name
                with zf.open(info) as src, open(out[name], "wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
            return out
    except zipfile.BadZipFile:
        raise _SourceFailed("not a zip archive") from None


def _fetch_source(
    source: str, names: list[str], staging: Path, checksums: Mapping[str, str], timeout: float
) -> dict[str, Path]:
    """Brings `names` from one source into `staging` and checks them."""
    logger.info("fetching %s from %s", ", ".join(names), source)
    if source.endswith("/") if _is_url(source) else Path(source).is_dir():  # a folder
        files = {}
        for name in names:
            if _is_url(source):
                location = urllib.parse.urljoin(source, name)
            else:
                location = str(Path(source) / name)
            files[name] = staging / name
            _fetch_to(location, files[name], timeout)
    else:
        archive = staging / "archive.zip"
        _fetch_to(source, archive, timeout)
        files = _extract_archive(archive, names, staging)
        archive.unlink()
    bad = []
    for name, path in files.items():
        if not verify_file(path, checksums[name]):
            got = file_checksum(path, checksums[name].partition(":")[0])
            path.unlink()
            logger.warning(
                "%s from %s does not match its checksum (expected %s, got %s); deleted it",
                name,
                source,
                checksums[name],
                got,
            )
            bad.append(name)
    if bad:
        raise _SourceFailed(f"checksum mismatch in {', '.join(bad)} (deleted)")
    return files


def fetch_wikitext2(
    dest_dir: str | os.PathLike,
    sources: Iterable[str] = WIKITEXT2_SOURCES,
    checksums: Mapping[str, str] = WIKITEXT2_CHECKSUMS,
    timeout: float = 30.0,
) -> dict[str, Path]:
    """Makes `dest_dir/{train,valid,test}.txt` hold verified WikiText-2 splits and returns
    {name: path}. Files already in place and matching are kept; otherwise `sources`
    (module docstring) are tried in order and the first whose files all match wins.
    DataError when none worked; without network access the one-line message says so
    and how to supply the files by hand."""
    dest_dir = Path(dest_dir)
    names = [n for n in SPLIT_FILES if not verify_file(dest_dir / n, checksums[n])]
    for name in names:
        if (dest_dir / name).exists():
            logger.warning("%s does not match its checksum; fetching it again", dest_dir / name)
    if not names:
        logger.info("WikiText-2 is already in %s and matches its checksums", dest_dir)
        return {n: dest_dir / n for n in SPLIT_FILES}

    # Folders made here are removed again if every source fails.
    created = [p for p in (dest_dir, *dest_dir.parents) if not p.exists()]
    dest_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _fetch_first(dest_dir, names, sources, checksums, timeout)
    except DataError:
        for folder in created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty
        raise


def _fetch_first(
    dest_dir: Path,
    names: list[str],
    sources: Iterable[str],
    checksums: Mapping[str, str],
    timeout: float,
) -> dict[str, Path]:
    """Tries the sources in order; the first whose files all verify is moved in."""
    failures: list[tuple[str, _SourceFailed]] = []
    for source in sources:
        staging = Path(dest_dir / f".fetch-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            files = _fetch_source(source, names, staging, checksums, timeout)
            for name, path in files.items():
                os.replace(path, dest_dir / name)
            if failures:
                logger.info("fell back to %s after %d failed source(s)", source, len(failures))
            logger.info("WikiText-2 is in %s (checksums verified)", dest_dir)
            return {n: dest_dir / n for n in SPLIT_FILES}
        except _SourceFailed as e:
            logger.warning("could not use %s: %s", source, e)
            failures.append((source, e))
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    how = (
        "get wikitext-2-v1.zip on a connected machine and pass "
        "--source=/path/to/wikitext-2-v1.zip, "
        "or put train.txt, valid.txt and test.txt in a folder and run "
        "DATA_DIR=/that/folder ./create_tfrecords.sh"
    )
    if failures and all(f.network for _, f in failures):
        raise DataError(
            f"cannot download WikiText-2: no network access ({len(failures)} sources unreachable); "
            + how
        )
    tried = "; ".join(f"{s}: {f}" for s, f in failures) or "no sources given"
    raise DataError(f"could not get WikiText-2 ({tried}); " + how)
