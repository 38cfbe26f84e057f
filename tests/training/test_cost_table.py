"""The measured cost table of a --search_cost=time search: priced in dense blocks timed in
the same passes (so a uniformly slower machine, a load that changes between passes, or a
spike in a few, gives the same costs; a dense block within the timer's noise is priced
at the noise), measured once when the run begins, written beside it, read again
when it resumes, refused in one line naming the file when it is missing, malformed or of
the earlier format in microseconds; and a fixed-depth search on MQAR that never holds
identity, end to end."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from partf.run_folder import COST_TABLE_FILE
from partf.serialization import KINDS, FormatError
from partf.tasks.mqar import MQARSettings, write_mqar
from partf.training import cost_table as cost_table_module
from partf.training.config import ConfigError, TrainConfig
from partf.training.cost_table import (
    cost_table,
    measure_costs,
    needs_table,
    price_passes,
    read_cost_table,
    table_names,
    time_passes,
    write_cost_table,
)
from partf.training.splits import load_data
from partf.training.trainer import train

SEARCH = "relative|norm D relative|norm D"

#: Seconds per training step of each one-block model on a made-up quiet machine: every
#: block adds its time to the identity's (the embedding and output layer).
STEP = {"identity": 1.0, "dense": 1.5, "norm": 2.75, "relative": 4.0}


class FakeMachine:
    """A clock and one step per block that advances it by the block's `STEP` times the
    load, which may change from one pass over the blocks to the next, or for one block
    in one pass (`load(pass, block)`)."""

    def __init__(self, load=lambda passes, name: 1.0):
        self.now, self.calls, self.load = 0.0, 0, load

    def clock(self):
        return self.now

    def steppers(self, names):
        return {name: (lambda name=name: self.step(name)) for name in names}

    def step(self, name):
        self.now += STEP[name] * self.load(self.calls // len(STEP), name)
        self.calls += 1


def priced(machine, passes=12):
    return price_passes(time_passes(machine.steppers(STEP), passes, clock=machine.clock), 100)


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
    # The dense block is the unit: timed even where no block may be dense.
    alone = config(splits, tmp_path, architecture="relative|norm " * 3 + "norm")
    assert table_names(alone) == ["dense", "identity", "norm", "relative"]


def test_a_cost_is_a_blocks_time_over_the_dense_blocks():
    costs, microseconds = priced(FakeMachine())
    assert costs["dense"] == 1.0 and costs["identity"] == 0.0
    assert costs["norm"] == (2.75 - 1.0) / (1.5 - 1.0) == 3.5
    assert costs["relative"] == (4.0 - 1.0) / (1.5 - 1.0) == 6.0
    # Microseconds per token of 100 tokens a step, the identity's time subtracted.
    assert microseconds == {"dense": 5000.0, "identity": 0.0, "norm": 17500.0, "relative": 30000.0}


def test_every_pass_steps_every_block_once_in_a_turning_order():
    order = []
    steppers = {name: (lambda name=name: order.append(name)) for name in ("a", "b", "c")}
    timed = time_passes(steppers, 4)
    assert len(timed) == 4 and all(set(one) == {"a", "b", "c"} for one in timed)
    assert order == [*"abc", *"bca", *"cab", *"abc"]


def test_a_slower_machine_gives_the_same_costs():
    quiet, quiet_us = priced(FakeMachine())
    slow, slow_us = priced(FakeMachine(load=lambda passes, name: 3.0))
    assert slow == quiet
    assert slow_us == {k: 3 * v for k, v in quiet_us.items()}


def test_a_load_that_changes_between_passes_slows_every_block_of_a_pass_alike():
    """Loads of 1, 4, 7, 3, 6, 2, 5, ... times the quiet machine, one a pass: the costs
    are the quiet machine's; the microseconds are the median pass's."""
    costs, microseconds = priced(FakeMachine(load=lambda passes, name: 1 + 3 * passes % 7))
    assert costs == priced(FakeMachine())[0]
    # The loads of the 12 passes, sorted: 1 1 2 3 3 4 4 5 6 6 7 7; their median is 4.
    assert microseconds["dense"] == 4 * 5000.0


def test_a_spike_in_a_few_passes_is_outvoted():
    """Another process takes the machine while one block steps, in 3 passes of 12."""
    spiked = FakeMachine(load=lambda passes, name: 20.0 if (passes, name) in SPIKES else 1.0)
    assert priced(spiked) == priced(FakeMachine())


SPIKES = {(1, "relative"), (5, "dense"), (9, "identity")}


def test_the_cheapest_blocks_are_floored():
    step = {"identity": 1.0, "dense": 1.5, "norm": 1.0, "relative": 0.9}
    costs, microseconds = price_passes([step], tokens=100)
    assert costs["norm"] == costs["relative"] == cost_table_module.FLOOR
    assert microseconds["norm"] == microseconds["relative"] == cost_table_module.FLOOR_US
    assert costs["identity"] == microseconds["identity"] == 0.0


def test_a_dense_block_within_the_noise_is_priced_at_the_noise(caplog):
    """A model too small for the dense block to stand out of the timer's noise: its time
    is floored at the noise (the standard error of its median), not at FLOOR_US, which
    would price the others in thousands of dense blocks."""
    timed = [
        {"identity": 1.0, "dense": 1.0 + (0.1 if i % 2 else -0.1), "relative": 4.0}
        for i in range(16)
    ]
    with caplog.at_level(logging.WARNING, logger="partf.training"):
        costs, microseconds = price_passes(timed, tokens=100)
    # Median absolute deviation 0.1: sigma 1.4826 x 0.1, over sqrt(16) passes.
    noise = 1.2533 * 1.4826 * 0.1 / 4 * 1e6 / 100
    assert microseconds["dense"] == pytest.approx(noise, rel=1e-4)
    assert costs["dense"] == 1.0
    assert costs["relative"] == pytest.approx(30000.0 / noise, rel=1e-3)  # about 65
    assert "within the timer's noise" in caplog.text


def test_measure_costs_prices_in_dense_blocks(run, monkeypatch):
    """The built one-block models, timed by a fake machine three times as loaded in the
    first 8 passes of 24 as in the rest."""
    cfg, _ = run
    machine = FakeMachine(load=lambda passes, name: 3.0 if passes < 8 else 1.0)
    real = cost_table_module.time_passes

    def fake_passes(steppers, passes):
        assert sorted(steppers) == sorted(STEP) and passes == 24
        for step in steppers.values():
            step()  # each one-block model trains a step
        return real(machine.steppers(steppers), passes, clock=machine.clock)

    monkeypatch.setattr(cost_table_module, "time_passes", fake_passes)
    table = measure_costs(cfg, load_data(cfg))
    assert table.costs == {"dense": 1.0, "identity": 0.0, "norm": 3.5, "relative": 6.0}
    tokens = table.batch_size * table.seq_len
    assert table.microseconds["dense"] == pytest.approx(0.5 * 1e6 / tokens)


def test_the_table_is_measured_written_beside_the_run_and_priced_into_its_model(run):
    cfg, results = run
    folder = f"{cfg.output_dir}/checkpoints/s"
    table = read_cost_table(Path(folder) / COST_TABLE_FILE)
    assert set(table.costs) == set(table.microseconds) == {"dense", "identity", "norm", "relative"}
    assert table.costs["dense"] == 1.0
    assert table.costs["identity"] == table.microseconds["identity"] == 0.0
    assert all(v > 0 for k, v in table.costs.items() if k != "identity")
    assert all(v > 0 for k, v in table.microseconds.items() if k != "identity")
    record = json.loads((Path(folder) / COST_TABLE_FILE).read_text())
    assert (record["format"], record["unit"]) == (KINDS["cost table"].version, "dense")
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
        (None, "finite, non-negative"),
        (None, "'costs'"),
        (None, "'microseconds'"),
        (None, "dense block must cost 1"),
    ],
)
def test_a_malformed_table_is_refused_in_one_line_naming_the_file(run, tmp_path, text, words):
    cfg, _ = run
    good = json.loads((Path(cfg.output_dir) / "checkpoints/s" / COST_TABLE_FILE).read_text())
    if text is None:
        if words in ("'costs'", "'microseconds'"):
            del good[words.strip("'")]
        elif words == "dense block must cost 1":
            good["costs"]["dense"] = 0.92
        else:
            good["costs"]["norm"] = -1.0
        text = json.dumps(good)
    path = tmp_path / COST_TABLE_FILE
    path.write_text(text)
    with pytest.raises(ConfigError, match=words) as caught:
        read_cost_table(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_table_of_the_earlier_format_in_microseconds_is_refused(tmp_path):
    """Format 1 priced in microseconds per token; a search would pay them as dense blocks.
    (Every kind's previous and newer format: tests/test_serialization.py.)"""
    old = {
        "format": "partf-cost-table", "format_version": 1,
        "unit": "microseconds per token, forward and backward",
        "costs": {"dense": 0.92, "identity": 0.0, "norm": 3.22, "relative": 5.19},
        "batch_size": 16, "seq_len": 256, "machine": "cpu", "backend": "tensorflow",
    }  # fmt: skip
    path = tmp_path / COST_TABLE_FILE
    path.write_text(json.dumps(old))
    with pytest.raises(FormatError) as caught:
        read_cost_table(path)
    message = str(caught.value)
    assert message.startswith(f"{path} was written by an earlier partf (cost table format 1;")
    assert "delete it, then train again with the same flags and --overwrite" in message
    assert "\n" not in message


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
