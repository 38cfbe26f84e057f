"""The model config a run builds, resolved in one function from its flags, the training
presets, --from_search, --drop_attention, --search_cost=time, the data and each
mechanism's options, is what the separate steps before it made, for every run of every
plan in studies/ (the record in resolved_plans.json was written by those steps;
`python tests/training/test_resolve.py` writes it again)."""

from __future__ import annotations

import collections
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
from tests.training.helpers import resolved

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
        model = resolved(config, data, rows, architecture=architecture, candidate_costs=costs)
        models[run.name] = model.to_dict()
        configs[run.name] = config
    arms: dict[str, dict[str, Any]] = {}
    for run in plan.runs():
        assert arms.setdefault(run.arm, models[run.name]) == models[run.name], run.name
    return arms


def _record(folder: Path) -> dict[str, Any]:
    """The record: "base", each field's most common value over every arm of every plan,
    and "plans", {plan: {arm: its fields that differ from base}} (kilobytes, not the 83
    configs written out)."""
    models = {path.stem: plan_models(path, folder / path.stem) for path in PLANS}
    arms = [model for plan in models.values() for model in plan.values()]
    base = {}
    for name in arms[0]:
        values = collections.Counter(json.dumps(model[name], sort_keys=True) for model in arms)
        base[name] = json.loads(values.most_common(1)[0][0])
    plans = {
        plan: {
            arm: {k: v for k, v in model.items() if v != base[k]} for arm, model in arms_.items()
        }
        for plan, arms_ in models.items()
    }
    return {"base": base, "plans": plans}


def recorded(plan: str) -> dict[str, dict[str, Any]]:
    """{arm: its recorded model config} of the plan named `plan`, each written out whole."""
    record = json.loads(RECORD.read_text())
    return {arm: {**record["base"], **fields} for arm, fields in record["plans"][plan].items()}


@pytest.mark.parametrize("path", PLANS, ids=[path.stem for path in PLANS])
def test_resolved_models_match_the_record_for_every_plan(path, tmp_path):
    assert plan_models(path, tmp_path) == recorded(path.stem)


def test_every_plan_is_recorded():
    assert sorted(json.loads(RECORD.read_text())["plans"]) == [path.stem for path in PLANS]


#: The data of the unit tests below.
SIZED = dict(vocab_size=3000, batch_size=4, tau_steps=20)


@pytest.mark.parametrize(
    "fields",
    [
        {"position": "auto", "architecture": "softmax D eva D"},
        {"attention": "eva", "attention_options": {"window_size": 8}},
        {"architecture": "transnormer"},
    ],
)
def test_options_and_position_resolve_with_the_data_for_the_final_architecture(fields):
    """The draft keeps the options and position given; with the data every option of the
    chosen mechanisms is written out and "auto" resolved, for the architecture the run
    has then (a run's --drop_attention sets it after reading the data)."""
    from partf.attention.registry import resolve_options
    from partf.training.resolve import resolve_model

    fields = {**fields, "num_layers": 4}
    draft = resolve_model(fields, objective="causal", search="par")
    assert draft.attention_options == fields.get("attention_options", {})
    assert draft.position == fields.get("position", "none")
    complete = resolve_model(draft, objective="causal", search="par", **SIZED)
    assert complete == resolve_model(fields, objective="causal", search="par", **SIZED)
    options = resolve_options(draft.attention_options, draft.attention_mechanisms)
    assert complete.attention_options == options and len(options) > len(draft.attention_options)
    assert complete.position == (draft.recommended_position if "position" in fields else "none")
    changed = resolve_model(
        draft, objective="causal", search="par", **SIZED, architecture="relative D norm I"
    )
    again = resolve_model(
        {**fields, "architecture": "relative D norm I"}, objective="causal", search="par", **SIZED
    )
    assert changed == again and "norm_feature_map" in changed.attention_options


def test_the_presets_apply_to_the_fields_not_given():
    from partf.training.resolve import resolve_model

    assert resolve_model({}, objective="causal", search="original").arch_parameterization == (
        "probabilities"
    )
    given = {"arch_parameterization": "logits"}
    assert (
        resolve_model(given, objective="causal", search="original").arch_parameterization
        == "logits"
    )
    assert resolve_model({}, objective="causal", search="par").arch_parameterization == "logits"
    encoder = resolve_model({"cutoffs": (20,)}, objective="mlm", search="original")
    assert (
        not encoder.causal and encoder.cutoffs == () and encoder.arch_parameterization == "logits"
    )


def test_a_refused_model_is_one_config_error_sentence():
    from partf.training.config import ConfigError
    from partf.training.resolve import resolve_model

    with pytest.raises(ConfigError, match=r"^cutoffs must be below vocab_size=100.*\.$") as e:
        resolve_model(
            {"cutoffs": (250,)}, objective="causal", search="par", **{**SIZED, "vocab_size": 100}
        )
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="'tau_steps' comes from the data"):
        resolve_model({"tau_steps": 3}, objective="causal", search="par")


if __name__ == "__main__":  # writes the record again
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        RECORD.write_text(json.dumps(_record(Path(folder)), indent=0, sort_keys=True) + "\n")
    sys.exit(0)
