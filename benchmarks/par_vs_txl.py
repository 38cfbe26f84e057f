"""Benchmark: the derived PAR architecture against a Transformer-XL of the same depth and width.

The second stage of the PAR method trains the architecture a search found as a
fixed model. This script trains two fixed models on the same records, with the
same step budget, learning-rate schedule and seed, and compares them:

* PAR: the searched architecture (`--from_search checkpoints/NAME`, argmax of
  pi per block with identity blocks dropped, as `partf-train --from_search`),
  labelled "PAR (searched)", or `--par` given directly (default "A A D D D D":
  attention in the first blocks only, the pattern the PAR paper reports),
  labelled "PAR pattern (given, not searched)".
* Transformer-XL: the same number of blocks alternating attention and
  feed-forward ("A D A D A D"), i.e. standard Transformer-XL layers, each
  attention followed by its feed-forward network.

Both have the base configuration's width (d_model 128, 4 heads, d_ffn 512,
mem_len 16, adaptive softmax cutoffs 250 and 2500) unless changed by flags.
The records are split in stream order: the first --train_batches batches
train (repeated to reach --steps), the rest are held out for perplexity
(memory starting empty). Reported per model: trainable parameters, training
steps per second (XLA-compiled, after the compiling call), inference
latency per segment (one compiled evaluation call on a [batch, seq_len]
segment with memory, best of --latency_repeats) and held-out perplexity.

The default run takes about 5 to 10 minutes on 2 CPU cores. The machine may
be shared, so timings are noisy: compare the two rows of one run, not runs.

Run: .venv/bin/python benchmarks/par_vs_txl.py [--steps 300]
     [--records ../shared/data/par-transformer-xl-original/tfrecords_valid]
     [--from_search checkpoints/NAME | --par "A A D D D D"]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_data import original_dir  # noqa: E402

ORIGINAL = original_dir()  # $PARTF_SHARED_DATA, else ../shared/data


def transformer_xl_architecture(num_blocks: int) -> str:
    """ "A D A D ...": Transformer-XL layers (attention, then feed-forward) as blocks."""
    return " ".join("A" if i % 2 == 0 else "D" for i in range(num_blocks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default=str(ORIGINAL / "tfrecords_valid"))
    parser.add_argument("--sp_model", default=str(ORIGINAL / "tokenizer/wiki2_12k.model"))
    parser.add_argument("--from_search", default=None, help="a finished search run's folder")
    parser.add_argument("--par", default="A A D D D D", help="PAR architecture (no search)")
    parser.add_argument("--steps", type=int, default=300, help="training steps per model")
    parser.add_argument("--train_batches", type=int, default=240, help="batches that train")
    parser.add_argument("--steps_per_execution", type=int, default=10)
    parser.add_argument("--max_lr", type=float, default=1e-3)
    parser.add_argument("--warmup_steps", type=int, default=30)
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--d_ffn", type=int, default=512)
    parser.add_argument("--mem_len", type=int, default=16)
    parser.add_argument("--latency_repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import keras
    import numpy as np
    import sentencepiece as spm
    import tensorflow as tf

    from partf.data import load_tfrecords
    from partf.models import PARTransformerXL
    from partf.training.lr_schedules import WarmupCosine
    from partf.training.optimizer import build_optimizer
    from partf.training.perplexity import Evaluator
    from partf.training.search import searched_architecture

    par, par_label = args.par, "PAR pattern (given, not searched)"
    if args.from_search:
        found = json.loads((Path(args.from_search) / "results.json").read_text())
        par = searched_architecture(found["pi"], found["candidates"])
        par_label = "PAR (searched)"
    blocks = len(par.split())
    txl = transformer_xl_architecture(blocks)

    vocab = spm.SentencePieceProcessor(model_file=args.sp_model).get_piece_size()
    data = load_tfrecords(args.records)
    inputs0, _ = next(iter(data))
    batch_size, seq_len = (int(n) for n in inputs0.shape)
    train = data.take(args.train_batches).cache().repeat()
    held_out = data.skip(args.train_batches).cache()

    rows = []
    for label, architecture in ((par_label, par), ("Transformer-XL", txl)):
        keras.utils.set_random_seed(args.seed)
        model = PARTransformerXL(
            vocab_size=vocab,
            d_model=args.d_model,
            num_heads=args.num_heads,
            d_ffn=args.d_ffn,
            num_layers=blocks,
            mem_len=args.mem_len,
            architecture=architecture,
            batch_size=batch_size,
        )
        schedule = WarmupCosine(args.max_lr, args.warmup_steps, args.steps)
        model.compile(
            optimizer=build_optimizer("adam", schedule),
            jit_compile=True,
            steps_per_execution=args.steps_per_execution,
        )
        params = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        # The first execution traces and compiles; time the rest.
        first = args.steps_per_execution
        model.fit(train, steps_per_epoch=first, epochs=1, verbose=0)
        start = time.perf_counter()
        history = model.fit(train, steps_per_epoch=args.steps - first, epochs=1, verbose=0)
        steps_per_second = (args.steps - first) / (time.perf_counter() - start)
        train_loss = history.history["loss"][-1]

        stats = Evaluator(model).evaluate(held_out)
        perplexity = math.exp(stats.total_nll / stats.num_tokens)

        segment = tf.function(lambda x, m=model: m(x, training=False), jit_compile=True)
        x = inputs0
        segment(x)
        best = float("inf")
        for _ in range(args.latency_repeats):
            start = time.perf_counter()
            np.asarray(segment(x))
            best = min(best, time.perf_counter() - start)
        rows.append(
            (label, architecture, params, steps_per_second, best * 1e3, train_loss, perplexity)
        )
        print(f"done: {rows[-1]}", flush=True)

    print()
    print(
        f"PAR vs Transformer-XL: {args.steps} steps each on the first {args.train_batches} "
        f"batches of {args.records} ([{batch_size}, {seq_len}] segments, vocabulary {vocab}), "
        f"perplexity on the other {stats.num_batches} batches ({stats.num_tokens} tokens); "
        f"d_model {args.d_model}, {args.num_heads} heads, d_ffn {args.d_ffn}, mem_len "
        f"{args.mem_len}; XLA on {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} (shared machine: timings are noisy)."
    )
    print()
    print(
        "| model | blocks | parameters | train steps/s | latency per segment (ms) | "
        "final train loss | held-out perplexity |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, architecture, params, sps, latency, loss, ppl in rows:
        print(
            f"| {label} | {architecture} | {params:,} | {sps:.2f} | {latency:.1f} | "
            f"{loss:.3f} | {ppl:.1f} |"
        )
    (par_row, txl_row) = rows
    print()
    print(
        f"{par_label} / Transformer-XL: parameters {par_row[2] / txl_row[2]:.2f}x, training speed "
        f"{par_row[3] / txl_row[3]:.2f}x, inference latency {par_row[4] / txl_row[4]:.2f}x, "
        f"perplexity {par_row[6] / txl_row[6]:.2f}x."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
