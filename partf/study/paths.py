"""Where a study writes: `StudyPaths` names each run's folder and files under the study
folder (the layout is in `partf.study.runner`'s docstring)."""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class StudyPaths:
    """Where a study writes (see the module docstring)."""

    out: Path

    def run_dir(self, name: str) -> Path:
        return self.out / "runs" / name

    def results(self, name: str) -> Path:
        return self.run_dir(name) / "checkpoints" / name / "results.json"

    def checkpoints(self, name: str) -> Path:
        return self.run_dir(name) / "checkpoints" / name

    def record(self, name: str) -> Path:
        return self.run_dir(name) / "study.json"

    def finished(self, name: str) -> bool:
        return self.results(name).is_file()
