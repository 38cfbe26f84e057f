"""Where a study writes: `StudyPaths` names each run's output folder (runs/<name>/), its
study.json and console.log under the study folder; the run's own files are its
`RunFolder` (partf.run_folder). docs/study.md ("Running, stopping, resuming") gives the
layout."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from partf.run_folder import RunFolder


@dataclasses.dataclass(frozen=True)
class StudyPaths:
    """Where a study writes (see the module docstring)."""

    out: Path

    def run_dir(self, name: str) -> Path:
        """The run's --output_dir."""
        return self.out / "runs" / name

    def run(self, name: str) -> RunFolder:
        """The run's folder: runs/<name>/checkpoints/<name>."""
        return RunFolder.of(self.run_dir(name), name)

    def checkpoints(self, name: str) -> Path:
        return self.run(name).path

    def record(self, name: str) -> Path:
        return self.run_dir(name) / "study.json"

    def console(self, name: str) -> Path:
        return self.run_dir(name) / "console.log"

    def finished(self, name: str) -> bool:
        return self.run(name).finished
