"""The measured cost table of a search with `--search_cost=time`: each candidate's
forward-and-backward time per token, on this machine, at the run's batch shape, in units
of the dense block's time measured in the same passes.

FLOPs are not time (on a CPU a softmax attention of 256 tokens costs more than its FLOPs
say, a linear one less), so a search that pays for time measures it when the run begins:
every candidate is timed as the only block of a model otherwise like the run's, compiled
as the run compiles, less the identity's time. Microseconds scale with the machine's
load, so the search pays in dense blocks, each figure the median over passes that step
every block once. The table is written as `cost_table.json` beside the run's results,
read again on resume (the same prices) and kept in `ModelConfig.candidate_costs`
(docs/search.md#cost-aware-search).

Example:
    >>> table, measured = cost_table(config, data, paths.checkpoints)   # read, or measure
    >>> table.costs
    {'dense': 1.0, 'identity': 0.0, 'norm': 3.5, 'relative': 5.64}
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from partf.atomic import atomic_write_text
from partf.errors import DataError
from partf.models.architecture import architecture_token
from partf.models.cost import cost_key
from partf.run_folder import RunFolder
from partf.serialization import FORMAT_KEY, KINDS, check_format
from partf.training.config import ConfigError, TrainConfig
from partf.training.splits import RunData

logger = logging.getLogger("partf.training")

#: The candidate whose time is the unit of the costs.
UNIT = "dense"
#: The floor of a measured time, in microseconds per token, and of a cost, in dense
#: blocks: a block never costs nothing (timer noise can make the difference to the
#: identity's time zero or negative for the cheapest candidates). The dense block's time,
#: the unit, is floored at its measurement's noise too (`price_passes`).
FLOOR_US = 0.01
FLOOR = 0.01


@dataclasses.dataclass(frozen=True)
class CostTable:
    """What a run's search pays per candidate.

    Attributes:
        costs: {candidate: forward-and-backward time per token over the dense block's,
            from the same passes}; "dense" 1, "identity" 0. What the search's loss charges.
        microseconds: {candidate: the same times in microseconds per token}; they scale
            with the machine's load, so the search does not pay them.
        batch_size, seq_len: the batch shape measured.
        machine: the processor it was measured on.
        backend: the Keras backend.
    """

    costs: dict[str, float]
    microseconds: dict[str, float]
    batch_size: int
    seq_len: int
    machine: str
    backend: str

    def to_dict(self) -> dict[str, Any]:
        return {
            FORMAT_KEY: KINDS["cost table"].version,
            "unit": UNIT,
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
    folder = RunFolder(checkpoints)
    path = folder.cost_table_path
    if not config.overwrite:
        if path.is_file():
            table = read_cost_table(path)
            logger.info("measured costs from %s: %s", path, _show(table))
            return table, False
        if folder.checkpoints():
            raise ConfigError(
                f"{path} is missing: this run's search was priced by the table measured "
                "when it began; put the file back, or start again with --overwrite "
                "(measures anew)."
            )
    table = measure_costs(config, data)
    logger.info("measured costs: %s", _show(table))
    return table, True


def write_cost_table(checkpoints: Path, table: CostTable) -> Path:
    """Writes `cost_table.json` into the run's checkpoint folder; returns its path."""
    path = RunFolder(checkpoints).cost_table_path
    atomic_write_text(path, json.dumps(table.to_dict(), indent=2) + "\n")
    return path


def read_cost_table(path: Path) -> CostTable:
    """A table written by `cost_table`.

    Raises:
        ConfigError: one line naming the file and what is wrong with it.
        FormatError: it is of another format (one line: both, and how to measure again).
    """
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        check_format(record, str(path), "cost table")
        if record.get("unit") != UNIT:
            raise ValueError(f"its unit must be {UNIT!r}, not {record.get('unit')!r}")
        costs = _figures(record["costs"], "costs")
        microseconds = _figures(record["microseconds"], "microseconds")
        if set(costs) != set(microseconds):
            raise ValueError("its costs and microseconds must name the same candidates")
        if costs.get(UNIT) != 1.0:
            raise ValueError(f"its {UNIT} block must cost 1 (the unit)")
        return CostTable(
            costs=costs,
            microseconds=microseconds,
            batch_size=int(record["batch_size"]),
            seq_len=int(record["seq_len"]),
            machine=str(record["machine"]),
            backend=str(record["backend"]),
        )
    except DataError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(
            f"{path} is not a valid measured cost table ({e}); delete it to measure again, "
            "or start the run again with --overwrite."
        ) from None


def _figures(values: Mapping[str, Any], what: str) -> dict[str, float]:
    figures = {str(k): float(v) for k, v in values.items()}
    if not figures or any(not np.isfinite(v) or v < 0 for v in figures.values()):
        raise ValueError(f"its {what} must be finite, non-negative numbers")
    return figures


def table_names(config: TrainConfig) -> list[str]:
    """The candidates a search's table prices: each block's, by `cost_key`, and the
    identity and the dense block (the floor subtracted and the unit) always."""
    from partf.layers.candidates import candidate_kind

    model = config.model
    names = []
    for block in model.block_candidates:
        for name in block:
            names.append(cost_key(*candidate_kind(name, model.attention)))
    return sorted(set(names) | {"identity", UNIT})


def measure_costs(config: TrainConfig, data: RunData, passes: int = 24) -> CostTable:
    """Times one training step of a one-block model of each candidate, every block once a
    pass (`time_passes`), and prices them in dense blocks (`price_passes`)."""
    from partf.training.build import build_model
    from partf.training.resolve import resolve_for_run

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
        resolved = resolve_for_run(one, data, batch)
        built = build_model(one, resolved, data, None)
        built.model.train_on_batch(x, x)  # compiles
        steppers[name] = functools.partial(built.model.train_on_batch, x, x)
    timed = time_passes(steppers, passes)
    # Nothing of the measurement may shift the run's own model (its layer names, seeds).
    keras.backend.clear_session()
    costs, microseconds = price_passes(timed, batch * length)
    return CostTable(
        costs=costs,
        microseconds=microseconds,
        batch_size=batch,
        seq_len=length,
        machine=_machine(),
        backend=keras.backend.backend(),
    )


def time_passes(
    steppers: Mapping[str, Callable[[], Any]],
    passes: int,
    clock: Callable[[], float] = time.perf_counter,
) -> list[dict[str, float]]:
    """Per pass, each block's seconds for one training step: a pass steps every block
    once, in an order that turns by one each pass, so that a change of the machine's load
    between passes slows every block of the pass alike. `steppers`: {candidate: a call
    that runs one training step}.
    """
    names = list(steppers)
    timed = []
    for index in range(passes):
        turn = index % len(names)
        seconds = {}
        for name in names[turn:] + names[:turn]:
            start = clock()
            steppers[name]()
            seconds[name] = clock() - start
        timed.append(seconds)
    return timed


def price_passes(
    timed: Sequence[Mapping[str, float]], tokens: int
) -> tuple[dict[str, float], dict[str, float]]:
    """(costs in dense blocks, microseconds per token) from each pass's seconds per step
    of every block, `tokens` a step.

    A block's time is the median over the passes of its time less the identity's in the
    same pass (a load that changes between passes scales numerator and denominator
    alike; one that spikes in a few passes is outvoted), floored at `FLOOR_US`; its cost
    is that over the dense block's, floored at `FLOOR`. The dense block costs 1, the
    identity 0. The dense block's time is floored too at what the passes can tell apart
    from nothing (the standard error of its median, `_median_error`): on a model too
    small for its time to stand out of a busy machine's noise, a unit of noise would
    price every block in thousands of dense blocks; a warning says when this applies.
    """
    if not timed:
        raise ValueError("no passes to price")
    names = sorted(timed[0])
    added = {
        name: [one[name] - one["identity"] for one in timed] for name in names if name != "identity"
    }
    per_token = 1e6 / tokens
    microseconds = {
        name: max(statistics.median(d) * per_token, FLOOR_US) for name, d in added.items()
    }
    microseconds["identity"] = 0.0
    noise = _median_error(added[UNIT]) * per_token
    if microseconds[UNIT] < noise:
        logger.warning(
            "the %s block's time (%.3g us/token over the model without it) is within the "
            "timer's noise on this machine (%.3g us/token): it is priced at the noise, so "
            "the costs in its unit are rough; measure on a quieter machine or a larger model",
            UNIT,
            microseconds[UNIT],
            noise,
        )
        microseconds[UNIT] = noise
    unit = microseconds[UNIT]
    costs = {
        name: 0.0 if name == "identity" else 1.0 if name == UNIT else max(us / unit, FLOOR)
        for name, us in microseconds.items()
    }
    return _rounded(costs), _rounded(microseconds)


def _median_error(values: Sequence[float]) -> float:
    """The standard error of the median of `values`, from their median absolute
    deviation (a few spikes move it as little as they move the median)."""
    middle = statistics.median(values)
    spread = 1.4826 * statistics.median(abs(v - middle) for v in values)
    return 1.2533 * spread / len(values) ** 0.5


def _rounded(figures: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in sorted(figures.items())}


def _machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _show(table: CostTable) -> str:
    """The costs in dense blocks, each with its microseconds per token."""
    return (
        ", ".join(
            f"{k} {v:.3g} ({table.microseconds.get(k, float('nan')):.3g} us/token)"
            for k, v in sorted(table.costs.items())
        )
        + f" (the {UNIT} block is the unit)"
    )
