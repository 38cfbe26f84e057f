"""The measured cost table of a --search_cost=time search: measured once when the run
begins, written beside it, read again when it resumes, refused in one line naming the
file when it is missing or malformed; and a fixed-depth search on MQAR that never holds
identity, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from partf.data.mqar import MQARSettings, write_mqar
from partf.training.config import ConfigError, TrainConfig
from partf.training.cost_table import (
    COST_TABLE_FILE,
    cost_table,
    needs_table,
    read_cost_table,
    table_names,
    write_cost_table,
)
from partf.training.splits import load_data
from partf.training.trainer import train

SEARCH = "relative|norm D relative|norm D"


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    settings = MQARSettings(
        seq_len=16, pairs=(2,), vocab_size=32, batch_size=4, train_examples=64,
        eval_examples=8,
    )  # fmt: skip
    return write_mqar(tmp_path_factory.mktemp("mqar") / "mq", settings)


def config(splits, out, **model):
    values = dict(
        vocab_size=None, d_model=16, num_heads=2, d_ffn=32, num_layers=4, mem_len=0,
        cutoffs=(), dropout_rate=0.0, architecture=SEARCH, search_cost="time",
        search_cost_weight=0.01, batch_size=None, tau_steps=None,
    )  # fmt: skip
    values.update(model)
    return TrainConfig(
        train_directory=str(splits["train"]),
        valid_directory=str(splits["valid"]),
        test_directory=str(splits["test"]),
        sp_model_prefix="",
        model_name="s",
        output_dir=str(out),
        search="par",
        max_steps=8,
        warmup_steps=2,
        steps_per_execution=4,
        log_every=4,
        ckpt_every=4,
        eval_every=8,
        jit_compile=False,
        model=values,
    )


@pytest.fixture(scope="module")
def run(splits, tmp_path_factory):
    """A fixed-depth search on MQAR priced by measured time, 8 steps."""
    cfg = config(splits, tmp_path_factory.mktemp("run"))
    results = train(cfg)
    return cfg, results


def test_only_a_time_priced_search_needs_a_table(splits, tmp_path):
    assert needs_table(config(splits, tmp_path))
    assert not needs_table(config(splits, tmp_path, search_cost="flops"))
    assert not needs_table(config(splits, tmp_path, search_cost_weight=0.0))
    assert not needs_table(config(splits, tmp_path, architecture="relative D norm D"))
    assert table_names(config(splits, tmp_path)) == ["dense", "identity", "norm", "relative"]


def test_the_table_is_measured_written_beside_the_run_and_priced_into_its_model(run):
    cfg, results = run
    folder = f"{cfg.output_dir}/checkpoints/s"
    table = read_cost_table(Path(folder) / COST_TABLE_FILE)
    assert set(table.costs) == {"dense", "identity", "norm", "relative"}
    assert table.costs["identity"] == 0.0
    assert all(v > 0 for k, v in table.costs.items() if k != "identity")
    assert (table.batch_size, table.seq_len) == (4, 16)
    assert results["config"]["model"]["candidate_costs"] == table.costs


def test_the_fixed_depth_search_never_holds_identity(run):
    _, results = run
    assert "identity" not in results["candidates"]
    blocks = results["architecture"].split()
    assert blocks[1::2] == ["D", "D"]  # dense blocks stay where the plan put them
    assert all(b in ("relative", "norm") for b in blocks[0::2])
    assert results["valid"]["accuracy"] is not None


def test_a_resumed_run_reads_its_table_and_a_missing_one_is_refused(run, splits):
    cfg, _ = run
    data = load_data(cfg)
    folder = Path(cfg.output_dir) / "checkpoints" / "s"
    table, measured = cost_table(cfg, data, folder)
    assert not measured and table == read_cost_table(folder / COST_TABLE_FILE)
    moved = folder / "moved.json"
    (folder / COST_TABLE_FILE).rename(moved)
    try:
        with pytest.raises(ConfigError, match="is missing") as caught:
            cost_table(cfg, data, folder)
        assert str(folder / COST_TABLE_FILE) in str(caught.value)
        assert "\n" not in str(caught.value)
    finally:
        moved.rename(folder / COST_TABLE_FILE)


@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", "not a valid measured cost table"),
        ('{"format": "other", "format_version": 1}', "not a partf-cost-table file"),
        (None, "finite, non-negative"),
        (None, "'costs'"),
    ],
)
def test_a_malformed_table_is_refused_in_one_line_naming_the_file(run, tmp_path, text, words):
    cfg, _ = run
    good = json.loads((Path(cfg.output_dir) / "checkpoints/s" / COST_TABLE_FILE).read_text())
    if text is None:
        if words == "'costs'":
            del good["costs"]
        else:
            good["costs"]["norm"] = -1.0
        text = json.dumps(good)
    path = tmp_path / COST_TABLE_FILE
    path.write_text(text)
    with pytest.raises(ConfigError, match=words) as caught:
        read_cost_table(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_written_table_reads_back(run, tmp_path):
    cfg, _ = run
    folder = Path(cfg.output_dir) / "checkpoints" / "s"
    table = read_cost_table(folder / COST_TABLE_FILE)
    assert read_cost_table(write_cost_table(tmp_path, table)) == table


def test_config_round_trips_with_a_table():
    from partf.models import ModelConfig

    config = TrainConfig().model.replace(
        vocab_size=24, cutoffs=(), search_cost="time", candidate_costs={"dense": 1}
    )
    assert ModelConfig.from_dict(config.to_dict()) == config
    assert config.candidate_costs == {"dense": 1.0}
