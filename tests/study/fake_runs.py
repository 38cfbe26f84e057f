"""A two-arm plan and finished runs made without training, for the report's tests and
the study command line's."""

from __future__ import annotations

import json

from partf.study.paths import StudyPaths

PLAN = """
seeds = [0, 1]
reference = "txl"
[data]
train = "records"
[arms]
txl = "--architecture='A D'"
par = { flags = "--search=par", stage2 = true }
"""


def fake_run(
    paths: StudyPaths,
    name: str,
    valid: float,
    flops: float,
    where: list[str],
    recall: float | None = None,
):
    """Writes what the report reads of a finished run: its results.json (with `recall`,
    the accuracy of a --recall_directory), and its record of the backends it ran on
    (`where`, one per launch)."""
    folder = paths.checkpoints(name)
    folder.mkdir(parents=True)
    results = {
        "valid": {"perplexity": valid},
        "test": {"perplexity": valid - 1},
        "architecture": "A D",
        "flops_per_token": {"blocks": flops - 1e6, "total": flops},
        "search": {"preset": "par"} if name.startswith("par-s") else None,
        "eval_ms_per_batch": {"test": 2.0},
    }
    if recall is not None:
        results["recall"] = {"loss": 1.0, "accuracy": recall, "num_tokens": 64}
    (folder / "results.json").write_text(json.dumps(results))
    launches = [{"backend": b, "machine": "m"} for b in where]
    paths.record(name).write_text(json.dumps({"launches": launches}))
