"""Files written atomically: a reader sees the old file or the new one, never half.

A file is written under a temporary name in its folder (`.tmp-<pid>-<name>`), flushed to
disk (`fsync`), then renamed over its final name (`os.replace`, atomic on POSIX), and the
folder is synced. Every file partf writes to read back is written so; a checkpoint
folder cleans up the temporary files a killed writer left (partf.training.checkpoint).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The prefix of a file being written; it is renamed once complete.
TMP_PREFIX = ".tmp-"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` for any writer (`model.save`, `savefig`): when the
    block ends, the file written there is synced and renamed over `path`; when it raises,
    the file is removed.

    Example:
        >>> with atomic_path(folder / "pi.png") as tmp:
        ...     figure.savefig(tmp)
    """
    path = Path(path)
    tmp = path.with_name(f"{TMP_PREFIX}{os.getpid()}-{path.name}")
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `data` to `path` (its folder must exist) so that readers see the old file or
    the new one, never half."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        _write_all(f, data)


def _write_all(f: Any, data: bytes) -> None:
    """Writes `data` in two halves. Between them, the interruption tests make the writer
    pause (PARTF_TEST_WRITE_PAUSE seconds) so that a kill lands mid-write."""
    half = len(data) // 2
    f.write(data[:half])
    pause = os.environ.get("PARTF_TEST_WRITE_PAUSE")
    if pause:
        f.flush()
        time.sleep(float(pause))
    f.write(data[half:])


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every platform can open a folder.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
