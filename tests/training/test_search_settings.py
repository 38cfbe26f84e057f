"""The search presets (--search) and what a search run reports: the architecture logits'
settings resolved for the run's length, `search/expected_cost` in TensorBoard, and the
search summary and FLOPs in results.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from partf.training.config import ConfigError, TrainConfig
from partf.training.optimizer import ArchSettings


def test_the_original_preset_shares_the_models_optimizer():
    assert TrainConfig().arch_settings(6080) == ArchSettings(None, None, 0)
    assert TrainConfig().arch_settings(6080).shared


@pytest.mark.parametrize(
    ("search", "model", "objective", "expected"),
    [
        ("original", {}, "causal", "probabilities"),
        ("original", {"arch_parameterization": "logits"}, "causal", "logits"),
        ("par", {}, "causal", "logits"),
        ("original", {}, "mlm", "logits"),
    ],
)
def test_the_original_preset_takes_the_originals_probabilities(search, model, objective, expected):
    """--search=original builds the causal model with the original's clipped
    probabilities unless --arch_parameterization is given; other presets keep logits."""
    config = TrainConfig(search=search, model=model, objective=objective)
    assert config.model.arch_parameterization == expected


def test_the_par_preset_freezes_for_half_the_run():
    config = TrainConfig(search="par")
    assert config.arch_settings(6080) == ArchSettings(3e-2, 5e-4, 3040)
    assert config.arch_settings(1001).freeze_steps == 500  # round(0.5 x 1001)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (dict(arch_lr=3e-3), ArchSettings(3e-3, 5e-4, 3040)),
        (dict(arch_weight_decay=0.0), ArchSettings(3e-2, 0.0, 3040)),
        (dict(arch_freeze_steps=100), ArchSettings(3e-2, 5e-4, 100)),
        (dict(arch_freeze_fraction=0.25), ArchSettings(3e-2, 5e-4, 1520)),
        (dict(arch_freeze_fraction=0.0), ArchSettings(3e-2, 5e-4, 0)),
    ],
)
def test_flags_given_win_over_the_preset(flags, expected):
    assert TrainConfig(search="par", **flags).arch_settings(6080) == expected


def test_a_freeze_fraction_without_a_preset():
    assert TrainConfig(arch_freeze_fraction=0.1).arch_settings(500) == ArchSettings(None, None, 50)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (dict(search="darts"), "unknown --search 'darts'"),
        (dict(arch_freeze_fraction=1.0), "--arch_freeze_fraction must be in [0, 1)"),
        (dict(arch_freeze_fraction=-0.1), "--arch_freeze_fraction must be in [0, 1)"),
    ],
)
def test_bad_search_settings_are_refused(flags, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(")", r"\)")):
        TrainConfig(**flags)


# ------------------------------------------------------------ a search run
def tiny_search(root, **overrides) -> TrainConfig:
    """A tiny --search=par run's settings (no XLA, to stay cheap) on Markov-chain records
    written under root."""
    from partf.data import context_batches, write_tfrecords

    if not (root / "train").exists():
        rng = np.random.default_rng(0)
        successors = rng.integers(1, 60, size=(60, 2))
        stream = np.empty(10 * 4 * 16 + 1, np.int32)
        stream[0] = 1
        for t in range(1, len(stream)):
            stream[t] = successors[stream[t - 1], rng.integers(0, 2)]
        write_tfrecords(context_batches(stream, 4, 16), root / "train", vocab_size=60)
    model = dict(d_model=16, num_heads=2, d_ffn=32, num_layers=2, mem_len=4, cutoffs=(20,))
    model.update(overrides.pop("model", {}))
    settings = dict(
        train_directory=str(root / "train"),
        valid_directory="",
        test_directory=str(root / "train"),
        sp_model_prefix="",
        model_name="search",
        output_dir=str(root / "out"),
        epochs=2,
        warmup_steps=2,
        search="par",
        jit_compile=False,
        steps_per_execution=2,
        log_every=4,
        model=model,
    )
    settings.update(overrides)
    return TrainConfig(**settings)


@pytest.fixture(scope="module")
def search_run(tmp_path_factory):
    """A tiny cost-aware --search=par run."""
    from partf.training.trainer import train

    root = tmp_path_factory.mktemp("search")
    results = train(tiny_search(root, model=dict(search_cost_weight=0.1)))
    return root / "out", results


def test_sampled_search_under_xla_is_refused_before_anything_is_written(tmp_path):
    from partf.training.trainer import train

    config = tiny_search(tmp_path, jit_compile=True, model=dict(search_estimator="sampled"))
    with pytest.raises(ConfigError, match="add --jit_compile=False"):
        train(config)
    assert not (tmp_path / "out" / "checkpoints" / "search").exists()


def test_results_report_the_resolved_search_and_the_cost(search_run):
    out, results = search_run
    search = results["search"]
    assert search["preset"] == "par" and search["estimator"] == "mixture"
    assert (search["arch_lr"], search["arch_weight_decay"], search["arch_freeze_steps"]) == (
        3e-2,
        5e-4,
        10,  # half of 2 epochs x 10 batches
    )
    flops = results["flops_per_token"]
    assert flops["total"] == pytest.approx(flops["blocks"] + flops["output"])
    assert flops["output"] > 0 and search["expected_flops_per_token"] > 0
    assert search["cost_weight"] == 0.1
    saved = json.loads((out / "checkpoints" / "search" / "results.json").read_text())
    assert saved["search"] == search and saved["architecture"] == results["architecture"]


def test_tensorboard_has_the_expected_cost(search_run):
    out, results = search_run
    events = EventAccumulator(str(out / "logs" / "search" / "train"))
    events.Reload()
    tags = events.Tags()["tensors"] + events.Tags()["scalars"]
    assert "search/expected_cost" in tags
