"""All-or-nothing outputs: write next to the target under a hidden name, then rename.

A build that fails or is interrupted leaves its targets as they were: no half
written record folder, no tokenizer without records, not even the parent
folders it had to create.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from partf.errors import UsageError


class StagedOutputs:
    """Hands out temporary places beside each target; moves them all in on success.

    Use as a context manager: the targets are replaced when the block ends
    without an exception; otherwise every temporary place is deleted. Without
    `overwrite`, `check`, `dir_for` and `file_for` raise `UsageError` for a target in the way.
    """

    def __init__(self, overwrite: bool = False):
        self.overwrite = overwrite
        self._pending: list[tuple[Path, Path, Path]] = []  # (staged, target, temp dir)
        self._created_parents: list[Path] = []

    def check(self, target: str | os.PathLike) -> None:
        """Raises UsageError if `target` exists and overwriting is off."""
        target = Path(target)
        if target.exists() and not self.overwrite:
            raise UsageError(
                f"{target} already exists; pass --overwrite to replace it, or choose another path"
            )

    def _temp_dir(self, target: Path) -> Path:
        self.check(target)
        missing = []
        parent = target.parent
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        for folder in reversed(missing):
            folder.mkdir()
            self._created_parents.append(folder)
        return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))

    def dir_for(self, target: str | os.PathLike) -> Path:
        """An empty folder that becomes `target` on success."""
        target = Path(target)
        temp = self._temp_dir(target)
        self._pending.append((temp, target, temp))
        return temp

    def file_for(self, target: str | os.PathLike) -> Path:
        """A path (same name as `target`, in a temporary folder) that becomes `target`."""
        target = Path(target)
        temp = self._temp_dir(target)
        self._pending.append((temp / target.name, target, temp))
        return temp / target.name

    def commit(self) -> None:
        """Moves every staged output onto its target, replacing what was there."""
        for staged, target, temp in self._pending:
            if not staged.exists():
                continue
            if target.exists() or target.is_symlink():
                # Move the old target aside first: a folder cannot be replaced in
                # one rename, and a file may be replaced by a folder.
                old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
                os.replace(target, old / target.name)
                os.replace(staged, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staged, target)
            if temp != staged:
                shutil.rmtree(temp, ignore_errors=True)
        self._pending.clear()
        self._created_parents.clear()

    def rollback(self) -> None:
        """Deletes every staged output and the parent folders made for them."""
        for _, _, temp in self._pending:
            shutil.rmtree(temp, ignore_errors=True)
        self._pending.clear()
        for folder in reversed(self._created_parents):
            # A folder that is not empty holds something else now: keep it.
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._created_parents.clear()

    def __enter__(self) -> StagedOutputs:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.commit()
            finally:
                self.rollback()
        else:
            self.rollback()
