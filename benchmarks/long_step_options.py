"""Benchmark: options for the CPU training step at the long context, side by side.

Two measurements, each on TensorFlow/XLA on the CPU:

- `--xla_flags=SET`, repeated: the whole compiled training step (partf's `fit`, 8 steps
  per execution) of a configuration of benchmarks/profile_step.py (`--config long`: the
  long-context Transformer-XL, 8 x 256 tokens, memory 256), once per XLA flag set. XLA
  reads its flags once per process, so each set runs in its own process; the sets run
  in turn, --passes times, and the best steps/s of each is reported. An empty set is
  XLA's defaults; `--jit off` adds a run without XLA.
- `--query_chunk=N`, repeated: the same whole step with relative attention's
  `query_chunk` option (`--attn_query_chunk`) at each N (0: off), one process each, in
  turn, with XLA's defaults.
- `--variants`: the relative attention layer alone (8 x 256 queries, memory 256,
  d_model 128, 4 heads), forward and backward compiled with XLA, in one process,
  round-robin, best of --rounds. Each variant computes the same attention with one part
  changed; "nopos" and "noshift" compute a wrong one on purpose, to bound what the
  position term and the shift cost:

      layer      the layer as partf has it
      nopad      the causal position scores gain a column for distance -1 (one row of
                 encodings more) instead of a zero column padded in
      fusekv     one matrix product projects keys and values together
      headsfirst the products run on [B, H, T, Dh] (transposed once) rather than einsums
                 over [B, T, H, Dh]
      noshift    the position scores' first K columns, without the relative shift
      nopos      no position term at all
      chunkN     the layer with query_chunk=N (`--attn_query_chunk`): the queries in
                 chunks of N, each against only the keys it can see

Compare only figures taken together, on a quiet machine (stop other work meanwhile).

Run: .venv/bin/python benchmarks/long_step_options.py --xla_flags= \
         --xla_flags=--xla_cpu_use_onednn=true [--jit off] [--config long] [--passes 2]
     .venv/bin/python benchmarks/long_step_options.py --variants [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

VARIANTS = (
    "layer",
    "nopad",
    "fusekv",
    "headsfirst",
    "noshift",
    "nopos",
    "chunk32",
    "chunk64",
    "chunk128",
)


def step_rate(config: str, steps: int, rounds: int, jit: bool, query_chunk: int = 0) -> float:
    """Best steps/s of `rounds` timed fits of `steps` steps after a compiling one."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from profile_step import compiled_model

    options = {"query_chunk": query_chunk} if query_chunk else None
    model, x, y, batch = compiled_model(
        config, steps, spe=8, jit_compile=jit, attention_options=options
    )
    seconds = []
    for _ in range(rounds + 1):  # the first compiles
        began = time.perf_counter()
        model.fit(x, y, batch_size=batch, shuffle=False, epochs=1, verbose=0)
        seconds.append(time.perf_counter() - began)
    return steps / min(seconds[1:])


def variant_call(layer: Any, x: Any, memory: Any, mask: Any, variant: str) -> Any:
    """RelativeAttention's causal training call with one part changed (see the docstring)."""
    from keras import ops

    from partf.attention.masking import masked_softmax
    from partf.attention.relative import relative_shift, sinusoidal_encoding

    batch, query_len = ops.shape(x)[0], ops.shape(x)[1]
    context = ops.concatenate([memory, x], axis=1)
    key_mask = ops.concatenate([ops.cast(mask, "bool"), ops.ones((batch, query_len), "bool")], 1)
    key_len = layer.mem_len + query_len
    heads, head_dim = layer.num_heads, layer.head_dim
    if variant == "fusekv":
        kernel = ops.concatenate([layer.key_dense.kernel, layer.value_dense.kernel], axis=1)
        rows = ops.reshape(context, (-1, layer.d_model))
        kv = ops.matmul(rows, ops.reshape(kernel, (layer.d_model, 2 * heads * head_dim)))
        kv = ops.reshape(kv, (batch, key_len, 2 * heads, head_dim))
        k, v = kv[:, :, :heads], kv[:, :, heads:]
    else:
        k, v = layer.key_dense(context), layer.value_dense(context)
    q = layer.query_dense(x)
    last = -1 if variant == "nopad" else 0
    distances = ops.arange(key_len - 1, last - 1, -1, dtype="int32")
    r = layer.position_dense(sinusoidal_encoding(distances, layer.d_model, x.dtype))
    u, pos_bias = layer.content_bias, layer.position_bias
    if variant == "headsfirst":
        qh, kh, vh = (ops.transpose(t, (0, 2, 1, 3)) for t in (q, k, v))
        content = ops.matmul(qh + u[:, None, :], ops.transpose(kh, (0, 1, 3, 2)))
        position = ops.einsum("bhtk,lhk->bhtl", qh + pos_bias[:, None, :], r)
    else:
        content = ops.einsum("bthk,bshk->bhts", q + u, k)
        position = ops.einsum("bthk,lhk->bhtl", q + pos_bias, r)
    if variant == "nopos":
        position = 0.0
    elif variant == "noshift":
        position = position[..., :key_len]
    else:
        if variant != "nopad":
            position = ops.pad(position, [[0, 0], [0, 0], [0, 0], [0, 1]])
        position = relative_shift(position, key_len)
    scores = (content + position) * layer._score_scale()
    key_pos = ops.arange(key_len)[None, :]
    query_pos = ops.arange(query_len)[:, None] + layer.mem_len
    visible = ops.logical_and(key_mask[:, None, None, :], (key_pos <= query_pos)[None, None])
    weights = masked_softmax(scores, visible)
    if variant == "headsfirst":
        out = ops.transpose(ops.matmul(weights, vh), (0, 2, 1, 3))
    else:
        out = ops.einsum("bhts,bshk->bthk", weights, v)
    return layer._output(out)


def variants(names: list[str], rounds: int) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    from partf.attention.relative import RelativeAttention

    batch, length, d_model = 8, 256, 128
    keras.utils.set_random_seed(0)
    layer = RelativeAttention(d_model=d_model, num_heads=4, mem_len=length, causal=True)
    x = tf.random.normal((batch, length, d_model))
    memory = tf.random.normal((batch, length, d_model))
    mask = tf.ones((batch, length), tf.int32)
    layer(x, state={"memory": memory, "memory_mask": mask})
    chunked = {}
    for name in names:
        if name.startswith("chunk"):
            chunked[name] = RelativeAttention(
                d_model=d_model, num_heads=4, mem_len=length, query_chunk=int(name[5:])
            )
            chunked[name](x, state={"memory": memory, "memory_mask": mask})
            chunked[name].set_weights(layer.get_weights())
    upstream = tf.random.normal((batch, length, d_model))

    def make(variant: str) -> Any:
        @tf.function(jit_compile=True)
        def step(x: Any, memory: Any, mask: Any) -> Any:
            with tf.GradientTape() as tape:
                tape.watch(x)
                if variant == "layer" or variant in chunked:
                    state = {"memory": memory, "memory_mask": mask}
                    y, _ = chunked.get(variant, layer)(x, state=state, training=True)
                else:
                    y = variant_call(layer, x, memory, mask, variant)
                loss = tf.reduce_sum(y * upstream)
            weights = chunked.get(variant, layer).trainable_variables
            grads = tape.gradient(loss, [x, *weights])
            return [tf.zeros(()) if g is None else g for g in grads]

        return step

    steps, reference = {}, None
    for name in names:
        steps[name] = make(name)
        grads = np.concatenate([np.ravel(g.numpy()) for g in steps[name](x, memory, mask)])
        if reference is None or grads.size != reference.size:
            reference = grads if reference is None else reference
            print(f"{name:11s} compiled")
        else:
            print(
                f"{name:11s} compiled; largest gradient difference from {names[0]}: "
                f"{np.max(np.abs(grads - reference)):.2e}"
            )
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            began = time.perf_counter()
            for _ in range(5):
                grads = steps[name](x, memory, mask)
            grads[0].numpy()
            times[name].append((time.perf_counter() - began) / 5)
    for name in names:
        print(f"{name:11s} forward and backward: best {1e3 * min(times[name]):.1f} ms")


def label_of(flags: str, jit: str, chunk: int) -> str:
    if jit == "off":
        return "without XLA"
    if chunk:
        return f"query_chunk={chunk}"
    return flags or "XLA defaults"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--xla_flags",
        action="append",
        default=None,
        help="one XLA flag set, given as --xla_flags=SET (repeat for more; empty: defaults)",
    )
    parser.add_argument(
        "--query_chunk",
        action="append",
        type=int,
        default=None,
        help="relative attention's query_chunk for a whole-step run (repeat; 0: off)",
    )
    parser.add_argument("--jit", choices=["on", "off"], default="on", help="also run without XLA")
    parser.add_argument("--config", default="long", choices=["base", "long"])
    parser.add_argument("--steps", type=int, default=16, help="steps per timed fit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--variants", nargs="*", default=None, choices=VARIANTS)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child_chunk", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        rate = step_rate(args.config, args.steps, args.rounds, args.child == "on", args.child_chunk)
        print(f"RATE {rate:.4f}")
        return 0
    if args.variants is not None:
        variants(list(args.variants or VARIANTS), args.rounds)
        return 0
    sets = [(flags, "on", 0) for flags in (args.xla_flags or [""])]
    sets += [("", "on", chunk) for chunk in args.query_chunk or [] if chunk]
    if args.jit == "off":
        sets.append(("", "off", 0))
    best: dict[tuple[str, str, int], float] = {}
    for _ in range(args.passes):
        for flags, jit, chunk in sets:
            env = {**os.environ, "XLA_FLAGS": flags}
            command = [
                sys.executable,
                __file__,
                "--child",
                jit,
                "--config",
                args.config,
                "--steps",
                str(args.steps),
                "--rounds",
                str(args.rounds),
                "--child_chunk",
                str(chunk),
            ]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RATE ")]
            if not lines:
                print(f"[{flags}] failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            rate = float(lines[-1].split()[1])
            best[flags, jit, chunk] = max(best.get((flags, jit, chunk), 0.0), rate)
            print(f"[{label_of(flags, jit, chunk)}]: {rate:.3f} steps/s", flush=True)
    print(f"best of {args.passes} pass(es), {args.config}:")
    for (flags, jit, chunk), rate in best.items():
        print(f"  {label_of(flags, jit, chunk)}: {rate:.3f} steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
