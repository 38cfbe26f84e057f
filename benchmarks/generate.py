"""Benchmark: generation speed with and without the carried state, at a 512-token context.

For each attention, one model of the base configuration (d_model 128, 4 heads,
d_ffn 512, 6 blocks, cutoffs 250 and 2500, vocabulary 12,000, the PAR search
model with attention/dense/identity candidates, evaluated with argmax
weights) generates after a prompt of --context tokens, batch 1:

* carried: each new token is fed alone with the carried state. For relative
  attention the XL memory is set to mem_len = --context, so every token sees
  the 512 tokens before it, as the baseline does; a linear attention's running
  sums cover the whole text at the same cost.
* recompute: every step feeds the last --context tokens again from an empty
  state (the same weights, rebuilt with mem_len 0 so no empty memory is
  attended).

Tokens per second count decoding only (`Generator.decode`: drawing each
token and feeding it back, one compiled loop over the tokens), not the
prompt's pass: the best of --repeats runs of --tokens tokens, after a
warm-up run that traces and compiles; the carried and recompute runs
alternate, so both see the same load. Both modes run only the candidate
that argmax weights pick in each block; carried relative attention also
reuses its memory's projected keys and values (its inference cache).
Sampling is plain (temperature 1): top-k and top-p add a sort of the
vocabulary to every step, which is cheap in a TensorFlow graph but costs
several ms per token under XLA on CPU.
Target: carried at least 10x recompute. Weights are random: speed does not
depend on them. The machine is shared, so timings are noisy: the best of
several repeats is reported.

Run: .venv/bin/python benchmarks/generate.py [--context 512] [--tokens 64]
     [--attentions relative linear performer] [--jit xla|graph|both]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

BASE = dict(
    vocab_size=12000,
    d_model=128,
    num_heads=4,
    d_ffn=512,
    num_layers=6,
    cutoffs=(250, 2500),
    dropout_rate=0.1,
    batch_size=1,
)


class DecodeTimer:
    """Times the decoding loop (draw a token, feed it, repeat) of one generator after
    its prompt."""

    def __init__(self, generator, prompt, tokens: int, sampling) -> None:
        self.generator, self.tokens, self.sampling = generator, tokens, sampling
        self.start = generator.start(prompt)  # the prompt's pass, not timed
        self.run()  # warm-up: trace and compile
        self.best = float("inf")

    def run(self) -> float:
        """One timed run of `tokens` tokens; returns (and keeps the best) seconds per token."""
        start = time.perf_counter()
        tokens, _ = self.generator.decode(*self.start, self.tokens, self.sampling)
        np.asarray(tokens)  # wait for the last token
        seconds = (time.perf_counter() - start) / self.tokens
        self.best = min(getattr(self, "best", float("inf")), seconds)
        return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=512, help="context length in tokens")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per timed run")
    parser.add_argument(
        "--recompute_tokens", type=int, default=16, help="tokens per timed recompute run"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the best is kept")
    parser.add_argument("--top_k", type=int, default=0, help="sampling top-k (0: none)")
    parser.add_argument("--top_p", type=float, default=1.0, help="sampling top-p (1: none)")
    parser.add_argument(
        "--attentions",
        nargs="+",
        default=["relative", "linear", "performer"],
        help="mechanisms to run",
    )
    parser.add_argument(
        "--jit",
        choices=["graph", "xla", "both"],
        default="xla",
        help="compile the decoding loop with XLA, as a plain TF graph, or report both",
    )
    args = parser.parse_args()

    import keras

    from partf.generation import Generator, Sampling, reconfigure
    from partf.models import PARTransformerXL

    keras.utils.set_random_seed(0)
    sampling = Sampling(temperature=1.0, top_k=args.top_k, top_p=args.top_p)
    prompt = np.random.default_rng(0).integers(3, BASE["vocab_size"], (1, args.context))
    jits = {"graph": [False], "xla": [True], "both": [False, True]}[args.jit]

    rows = []
    for attention in args.attentions:
        model = PARTransformerXL(
            BASE, attention=attention, mem_len=args.context if attention == "relative" else 0
        )
        baseline_model = reconfigure(model, mem_len=0)
        coverage = f"{args.context} (XL memory)" if attention == "relative" else "unbounded"
        for jit in jits:
            compiled = "XLA" if jit else "graph"
            carried = Generator(model, mode="carried", jit_compile=jit)
            recompute = Generator(
                baseline_model, mode="recompute", context_len=args.context, jit_compile=jit
            )
            try:
                timers = (
                    DecodeTimer(carried, prompt, args.tokens, sampling),
                    DecodeTimer(recompute, prompt, args.recompute_tokens, sampling),
                )
            except Exception as e:  # report the failure in the table, go on with the rest
                first = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
                rows.append(
                    (attention, compiled, coverage, None, None, f"{type(e).__name__}: {first}")
                )
                print(f"failed: {attention} {compiled}", flush=True)
                continue
            # Alternate the two, so that both see the same load on a shared machine.
            for _ in range(args.repeats):
                for timer in timers:
                    timer.run()
            fast, slow = (timer.best for timer in timers)
            rows.append((attention, compiled, coverage, 1 / slow, 1 / fast, f"{slow / fast:.1f}x"))
            print(f"done: {attention} {compiled}: {rows[-1][3:]}", flush=True)

    print()
    print(
        f"Generation, batch 1, {args.context}-token context, base configuration "
        f"({platform.machine()}, {os.cpu_count()} CPUs, keras {keras.__version__}, "
        f"backend {keras.backend.backend()}, load average {os.getloadavg()[0]:.1f}; "
        f"sampling {sampling}):"
    )
    print()
    print(
        "| attention | step compiled as | state covers | recompute tokens/s | "
        "carried tokens/s | speed-up |"
    )
    print("|---|---|---|---:|---:|---:|")
    for attention, compiled, coverage, slow, fast, ratio in rows:
        slow_text = "-" if slow is None else f"{slow:.1f}"
        fast_text = "-" if fast is None else f"{fast:.1f}"
        print(f"| {attention} | {compiled} | {coverage} | {slow_text} | {fast_text} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
