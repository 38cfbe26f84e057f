"""Benchmark: build the records of WikiText-2 valid.txt with an existing tokenizer.

Target: under 2 s on 2 CPU cores (the original project's build_data.py takes
29 s for the same file on the same machine). Uses ../shared/data (override
with PARTF_SHARED_DATA): wikitext-2/valid.txt and the original project's
12k SentencePiece model. Also reports how fast the records read back in a
graph loop, which bounds the batches per second training can consume.

Run: .venv/bin/python benchmarks/build_data.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from shared_data import original_dir, shared_data_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEXT = shared_data_dir() / "wikitext-2" / "valid.txt"
MODEL = original_dir() / "tokenizer" / "wiki2_12k.model"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed builds after the first")
    args = parser.parse_args()
    if not TEXT.is_file() or not MODEL.is_file():
        print(f"benchmark data missing: needs {TEXT} and {MODEL}", file=sys.stderr)
        return 1

    import tensorflow as tf

    from partf.data import build_records, load_tfrecords

    with tempfile.TemporaryDirectory() as tmp:
        times = []
        for i in range(1 + args.repeats):
            start = time.perf_counter()
            meta = build_records(TEXT, MODEL, Path(tmp) / f"valid_{i}", batch_size=32, seq_len=32)
            times.append(time.perf_counter() - start)
        print(
            f"build valid.txt ({meta.num_tokens} tokens -> {meta.num_batches} batches of "
            f"[32, 33]): first {times[0]:.2f} s, best of next {args.repeats} "
            f"{min(times[1:], default=times[0]):.2f} s (target < 2 s)"
        )

        dataset = load_tfrecords(Path(tmp) / "valid_0").repeat(20)

        @tf.function
        def consume(ds: tf.data.Dataset) -> tf.Tensor:
            count = tf.constant(0, tf.int64)
            for inputs, _ in ds:
                count += tf.cast(tf.shape(inputs)[0] > 0, tf.int64)
            return count

        consume(dataset.take(2))
        start = time.perf_counter()
        count = int(consume(dataset))
        elapsed = time.perf_counter() - start
        print(f"read back: {count / elapsed:,.0f} batches/s ({count} batches in {elapsed:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
