"""Benchmark: where linear attention starts to beat softmax attention in measured time.

For the recall study's model (width 64, two heads, dense width 128, no memory), times one
training step (forward and backward, Adam) of each mixer as the only block, with
`partf.training.cost_table.measure_costs`, the measurement a `--search_cost=time` search
makes when it begins, at several lengths with the same tokens per batch, and prints the
microseconds per token each adds over the model without it (embedding and output layer;
the table's `microseconds`, not the dense-block units a search pays), and the length
from which each linear mixer is cheaper than relative attention.

Run: .venv/bin/python benchmarks/mixer_cost.py [--lengths 64 256 1024 4096]
     [--tokens 4096] [--mixers relative local norm linear] [--passes 40] [--out FILE]
Pause other work on the machine while it runs: each figure is a difference of two times.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def measure(
    length: int, tokens: int, mixers: list[str], vocab: int, passes: int
) -> dict[str, float]:
    """{mixer: us/token} at `length`, `tokens // length` rows a batch."""
    from partf.tasks.mqar import MQARSettings, write_mqar
    from partf.training.config import TrainConfig
    from partf.training.cost_table import measure_costs
    from partf.training.splits import load_data

    rows = max(tokens // length, 1)
    search = " ".join(["|".join(mixers), "D"])
    with tempfile.TemporaryDirectory() as folder:
        settings = MQARSettings(
            seq_len=length, pairs=(1,), vocab_size=vocab, batch_size=rows,
            train_examples=rows, eval_examples=rows,
        )  # fmt: skip
        splits = write_mqar(Path(folder) / "mq", settings)
        config = TrainConfig(
            train_directory=str(splits["train"]),
            valid_directory="",
            test_directory="",
            sp_model_prefix="",
            output_dir=folder,
            search="par",
            max_steps=1,
            warmup_steps=0,
            model=dict(
                vocab_size=None, batch_size=None, tau_steps=None, d_model=64, num_heads=2,
                d_ffn=128, num_layers=2, mem_len=0, dropout_rate=0.0, cutoffs=(),
                position="rotary", architecture=search, search_cost="time",
                search_cost_weight=0.01,
            ),
        )  # fmt: skip
        return measure_costs(config, load_data(config), passes=passes).microseconds


def crossover(table: dict[int, dict[str, float]], mixer: str) -> int | None:
    """The shortest length from which `mixer` stays cheaper than relative attention."""
    lengths = sorted(table)
    for i, length in enumerate(lengths):
        if all(table[n][mixer] < table[n]["relative"] for n in lengths[i:]):
            return length
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per batch")
    parser.add_argument("--mixers", nargs="+", default=["relative", "local", "norm", "linear"])
    parser.add_argument("--vocab_size", type=int, default=256)
    parser.add_argument(
        "--passes", type=int, default=40, help="passes over the mixers; the median counts"
    )
    parser.add_argument("--out", help="also write the table as JSON here")
    args = parser.parse_args(argv)
    if "relative" not in args.mixers:
        print("mixer_cost: --mixers must include relative (the softmax baseline).", file=sys.stderr)
        return 2
    table = {}
    for length in args.lengths:
        print(f"mixer_cost: measuring {length} tokens", file=sys.stderr, flush=True)
        table[length] = measure(length, args.tokens, args.mixers, args.vocab_size, args.passes)
    print("| tokens | " + " | ".join(args.mixers) + " | dense |")
    print("|---:|" + "---:|" * (len(args.mixers) + 1))
    for length, costs in table.items():
        cells = " | ".join(f"{costs[m]:.2f}" for m in [*args.mixers, "dense"])
        print(f"| {length} | {cells} |")
    for mixer in args.mixers:
        if mixer != "relative":
            found = crossover(table, mixer)
            where = f"from {found} tokens on" if found else "not from any length on"
            print(f"{mixer}: cheaper than relative {where}")
    if args.out:
        Path(args.out).write_text(json.dumps({str(k): v for k, v in table.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
