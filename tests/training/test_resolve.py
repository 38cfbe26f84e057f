"""The model config a run builds, resolved in one call from its flags, the training
presets, --drop_attention and the data, is what the four steps before issue 64 made, for
every run of every plan in studies/ (the record in resolved_plans.json was written by
those steps; `python tests/training/test_resolve.py` writes it again)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from partf.cli import train as train_cli
from partf.study.plan import load_plan
from partf.training.cost_table import needs_table, table_names
from partf.training.search import searched_architecture

ROOT = Path(__file__).resolve().parents[2]
RECORD = Path(__file__).with_name("resolved_plans.json")
PLANS = sorted((ROOT / "studies").glob("*.toml"))
#: The run's length tau anneals over (any value: the data's steps in all).
TOTAL_STEPS = 1234


@dataclasses.dataclass(frozen=True)
class FakeData:
    """What the model config reads of a `RunData`."""

    vocab_size: int
    total_steps: int = TOTAL_STEPS


def _data_shape(plan: Any, task: str) -> tuple[int, int]:
    """(vocabulary size, batch rows) of a run's records."""
    if task == "mqar":
        return plan.tasks[task]["vocab_size"], plan.tasks[task]["batch_size"]
    return plan.data.vocab_size, plan.data.batch_size


def _dropped(source: dict[str, Any], count: int) -> str:
    """An architecture as --drop_attention chooses one: the source's first `count`
    attention blocks replaced by the identity (the choice itself scores the source)."""
    from partf.models.config import ModelConfig, architecture_token

    tokens = [architecture_token(names[0]) for names in ModelConfig(**source).block_candidates]
    attention = [i for i, token in enumerate(tokens) if token not in ("D", "I")]
    for i in attention[:count]:
        tokens[i] = "I"
    return " ".join(tokens)


def _costs(config: Any) -> dict[str, float]:
    """A made-up measured table: every candidate its own price, the identity 0."""
    names = table_names(config)
    return {name: 0.0 if name == "identity" else float(i + 1) for i, name in enumerate(names)}


def _finished_search(folder: Path, name: str, config: Any, model: dict[str, Any]) -> Path:
    """A search run's results.json, pi choosing block b's candidate b mod its count."""
    from partf.models.config import ModelConfig
    from partf.serialization import FORMAT_KEY, FORMAT_VERSION

    resolved = ModelConfig(**model)
    columns = list(resolved.search_candidates)
    pi = []
    for b, names in enumerate(resolved.block_candidates):
        row = [0.0] * len(columns)
        for candidate in names:
            row[columns.index(candidate)] = 0.1
        row[columns.index(names[b % len(names)])] = 0.9
        pi.append(row)
    searched_architecture(pi, columns)  # decided
    run = folder / name
    run.mkdir(parents=True)
    training = {k: v for k, v in config.to_dict().items() if k != "model"}
    results = {
        FORMAT_KEY: FORMAT_VERSION,
        "model_name": name,
        "pi": pi,
        "candidates": columns,
        "config": {"model": model, "training": training},
    }
    (run / "results.json").write_text(json.dumps(results))
    return run


def resolved(config: Any, data: FakeData, rows: int, architecture: Any, costs: Any) -> Any:
    """The ModelConfig the run's model is built from, resolved in one call."""
    from partf.training.resolve import resolve_model

    return resolve_model(config, data, rows, architecture=architecture, candidate_costs=costs)


def plan_models(path: Path, folder: Path) -> dict[str, dict[str, Any]]:
    """{arm: its runs' resolved model config} for every run of the plan at `path` (the
    seeds of an arm resolve to one model config)."""
    plan = load_plan(path)
    models: dict[str, dict[str, Any]] = {}
    configs: dict[str, Any] = {}
    for run in plan.runs():
        start = ["--init_from=x"] if run.init_from is not None else []
        if run.after is not None:
            search = _finished_search(folder, run.after, configs[run.after], models[run.after])
            argv = [f"--from_search={search}", *start, *run.flags]
        else:
            argv = ["--train_directory=x", *start, *run.flags, f"--seed={run.seed}"]
        config, _ = train_cli.parse_args(argv)
        architecture = costs = None
        if config.drop_attention:
            architecture = _dropped(models[run.init_from], config.drop_attention)
        vocab_size, rows = _data_shape(plan, run.task)
        if needs_table(config):
            costs = _costs(config)
        data = FakeData(vocab_size)
        model = resolved(config, data, rows, architecture, costs)
        models[run.name] = model.to_dict()
        configs[run.name] = config
    arms: dict[str, dict[str, Any]] = {}
    for run in plan.runs():
        assert arms.setdefault(run.arm, models[run.name]) == models[run.name], run.name
    return arms


def _record(folder: Path) -> dict[str, Any]:
    return {path.stem: plan_models(path, folder / path.stem) for path in PLANS}


@pytest.mark.parametrize("path", PLANS, ids=[path.stem for path in PLANS])
def test_resolved_models_match_the_record_for_every_plan(path, tmp_path):
    record = json.loads(RECORD.read_text())
    assert plan_models(path, tmp_path) == record[path.stem]


def test_every_plan_is_recorded():
    assert sorted(json.loads(RECORD.read_text())) == [path.stem for path in PLANS]


if __name__ == "__main__":  # writes the record again
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        RECORD.write_text(json.dumps(_record(Path(folder)), indent=1, sort_keys=True) + "\n")
    sys.exit(0)
