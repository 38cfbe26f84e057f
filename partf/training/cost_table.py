"""The measured cost table of a search with `--search_cost=time`: each candidate's
forward-and-backward microseconds per token, on this machine, at the run's batch shape.

FLOPs are not time: on a CPU a softmax attention of 256 tokens costs more than its
FLOPs say, and a linear one less. So a search that pays for time measures it. When a run
begins, every candidate of its search (each attention mechanism, dense, identity) is timed
as the only block of a model otherwise like the run's (same width, memory, output layer),
compiled as the run compiles, on random tokens of one training batch's shape; the
identity's time (the embedding and output layer alone) is subtracted, so each figure is
what one block of that kind adds. The table is written as `cost_table.json` beside the
run's results, read again when the run resumes (so a resumed search pays the same prices),
and kept in the model's configuration (`ModelConfig.candidate_costs`).

Example:
    >>> table, measured = cost_table(config, data, paths.checkpoints)   # read, or measure
    >>> table.costs
    {'dense': 0.41, 'identity': 0.0, 'norm': 0.62, 'relative': 1.9}
"""

from __future__ import annotations

import dataclasses
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np

from partf.models.architecture import architecture_token
from partf.models.cost import cost_key
from partf.training.atomic import atomic_write_text
from partf.training.config import ConfigError, TrainConfig
from partf.training.splits import RunData

logger = logging.getLogger("partf.training")

#: The file beside a run's results.json.
COST_TABLE_FILE = "cost_table.json"
FORMAT = "partf-cost-table"
FORMAT_VERSION = 1
#: The floor of a measured cost: a block never costs nothing (timer noise can make the
#: difference to the identity's time zero or negative for the cheapest candidates).
FLOOR_US = 0.01


@dataclasses.dataclass(frozen=True)
class CostTable:
    """What a run's search pays per candidate.

    Attributes:
        costs: {candidate: forward-and-backward microseconds per token}; "identity" 0.
        batch_size, seq_len: the batch shape measured.
        machine: the processor it was measured on.
        backend: the Keras backend.
    """

    costs: dict[str, float]
    batch_size: int
    seq_len: int
    machine: str
    backend: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "unit": "microseconds per token, forward and backward",
            **dataclasses.asdict(self),
        }


def needs_table(config: TrainConfig) -> bool:
    """Whether this run's search charges measured time (and so needs a table); not with
    --drop_attention, whose architecture is fixed (the blocks kept and identities)."""
    model = config.model
    searches = model.is_stochastic and not config.drop_attention
    return model.search_cost == "time" and model.search_cost_weight > 0 and searches


def cost_table(config: TrainConfig, data: RunData, checkpoints: Path) -> tuple[CostTable, bool]:
    """The run's table: read from `checkpoints/cost_table.json`, or, for a run that
    begins (or starts again with --overwrite), measured now.

    Returns:
        (the table, whether it was measured now: `write_cost_table` it once the run's
        folders are ready).

    Raises:
        ConfigError: the file is malformed, or missing while the run resumes from a
            checkpoint (its search was priced by a table that is gone).
    """
    path = checkpoints / COST_TABLE_FILE
    if not config.overwrite:
        if path.is_file():
            table = read_cost_table(path)
            logger.info("measured costs (us/token) from %s: %s", path, _show(table.costs))
            return table, False
        if any(checkpoints.glob("ckpt-*")):
            raise ConfigError(
                f"{path} is missing: this run's search was priced by the table measured "
                "when it began; put the file back, or start again with --overwrite "
                "(measures anew)."
            )
    table = measure_costs(config, data)
    logger.info("measured costs (us/token): %s", _show(table.costs))
    return table, True


def write_cost_table(checkpoints: Path, table: CostTable) -> Path:
    """Writes `cost_table.json` into the run's checkpoint folder; returns its path."""
    path = checkpoints / COST_TABLE_FILE
    atomic_write_text(path, json.dumps(table.to_dict(), indent=2) + "\n")
    return path


def read_cost_table(path: Path) -> CostTable:
    """A table written by `cost_table`.

    Raises:
        ConfigError: one line naming the file and what is wrong with it.
    """
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") != FORMAT or record.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"not a {FORMAT} file of version {FORMAT_VERSION} (found "
                f"{record.get('format')!r} version {record.get('format_version')!r})"
            )
        costs = {str(k): float(v) for k, v in record["costs"].items()}
        if not costs or any(not np.isfinite(v) or v < 0 for v in costs.values()):
            raise ValueError("its costs must be finite, non-negative numbers")
        return CostTable(
            costs=costs,
            batch_size=int(record["batch_size"]),
            seq_len=int(record["seq_len"]),
            machine=str(record["machine"]),
            backend=str(record["backend"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(
            f"{path} is not a valid measured cost table ({e}); delete it to measure again, "
            "or start the run again with --overwrite."
        ) from None


def table_names(config: TrainConfig) -> list[str]:
    """The candidates a search's table must price: each block's, by `cost_key`."""
    from partf.layers.candidates import candidate_kind

    model = config.model
    names = []
    for block in model.block_candidates:
        for name in block:
            names.append(cost_key(*candidate_kind(name, model.attention)))
    return sorted(set(names) | {"identity"})


def measure_costs(
    config: TrainConfig, data: RunData, repeats: int = 3, steps: int = 8
) -> CostTable:
    """Times one training step of a one-block model of each candidate (best of `repeats`
    rounds of `steps` steps, round-robin so that a change of load hits all alike) and
    subtracts the identity's time."""
    from partf.training.build import build_model
    from partf.training.resolve import resolve_model

    batch, length = data.train.batch_size, data.train.seq_len
    rng = np.random.default_rng(0)
    x = rng.integers(1, data.vocab_size, size=(batch, length)).astype("int32")
    steppers = {}
    for name in table_names(config):
        model = config.model.replace(
            architecture=architecture_token(name),
            num_layers=1,
            search_cost_weight=0.0,
            search_cost="flops",
        )
        one = dataclasses.replace(config, model=model, spike_guard="off", compiled_loop=False)
        built = build_model(one, resolve_model(one, data, batch), data, None)
        built.model.train_on_batch(x, x)  # compiles
        steppers[name] = built.model
    best = {name: float("inf") for name in steppers}
    for _ in range(repeats):
        for name, model in steppers.items():
            start = time.perf_counter()
            for _ in range(steps):
                model.train_on_batch(x, x)
            best[name] = min(best[name], (time.perf_counter() - start) / steps)
    # Nothing of the measurement may shift the run's own model (its layer names, seeds).
    keras.backend.clear_session()
    base = best["identity"]
    per_token = 1e6 / (batch * length)
    costs = {
        name: 0.0 if name == "identity" else max((t - base) * per_token, FLOOR_US)
        for name, t in best.items()
    }
    return CostTable(
        costs={k: round(v, 4) for k, v in costs.items()},
        batch_size=batch,
        seq_len=length,
        machine=_machine(),
        backend=keras.backend.backend(),
    )


def _machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _show(costs: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in sorted(costs.items()))
