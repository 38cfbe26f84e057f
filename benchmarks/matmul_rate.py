"""Benchmark: this CPU's float32 matrix-product rate at the training step's shapes.

A step can run no faster than its matrix products allow, so this is the ceiling against
which a step's FLOP rate is read (benchmarks/train_throughput.py gives the step's FLOPs).
Each shape is timed three ways, in one process, best of --rounds rounds of --repeats
products (the machine's speed drifts, so the best round is the one least disturbed):

- numpy (its BLAS, OpenBLAS in the wheels): what the cores can do;
- TensorFlow with XLA (`tf.function(jit_compile=True)`), the path partf-train compiles;
- TensorFlow's graph executor without XLA (the original project's path).

The shapes: 2048 cubed (a large product, near the machine's peak), and the base
configuration's feed-forward products (1,024 tokens of width 128 by 512, both ways) and
the long context's (2,048 tokens).

Run: .venv/bin/python benchmarks/matmul_rate.py [--rounds 3] [--repeats 20]
Pause other work on the machine while it runs.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: (rows, inner, columns) of each timed product.
SHAPES = ((2048, 2048, 2048), (1024, 128, 512), (1024, 512, 128), (2048, 128, 512))


def best_rate(product: Callable[[], object], flops: float, rounds: int, repeats: int) -> float:
    """GFLOP/s of `product` in its fastest round, after one call that compiles."""
    np.asarray(product())
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            result = product()
        np.asarray(result)  # wait for the last product
        best = min(best, (time.perf_counter() - start) / repeats)
    return flops / best / 1e9


def products(a: np.ndarray, b: np.ndarray) -> tuple[Callable[[], object], ...]:
    """The product a @ b by numpy, by TensorFlow with XLA and by TensorFlow without it."""
    import tensorflow as tf

    ta, tb = tf.constant(a), tf.constant(b)
    xla = tf.function(lambda: tf.matmul(ta, tb), jit_compile=True)
    graph = tf.function(lambda: tf.matmul(ta, tb), jit_compile=False)
    return (lambda: a @ b, xla, graph)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    print("| shape | numpy GFLOP/s | TensorFlow, XLA | TensorFlow, no XLA |")
    print("|---|---:|---:|---:|")
    for rows, inner, cols in SHAPES:
        a = rng.standard_normal((rows, inner), dtype=np.float32)
        b = rng.standard_normal((inner, cols), dtype=np.float32)
        flops = 2.0 * rows * inner * cols
        rates = [best_rate(fn, flops, args.rounds, args.repeats) for fn in products(a, b)]
        cells = " | ".join(f"{rate:.1f}" for rate in rates)
        print(f"| {rows}x{inner} by {inner}x{cols} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
