"""Benchmark: ms per token at batch 1 of partf-generate, a SavedModel and LiteRT, after
prompts of --contexts tokens, beside keras-hub's GPT-2 CausalLM.generate (a speed peer).

Four models of the base configuration (d_model 128, 4 heads, d_ffn 512, 6 blocks,
cutoffs 250 and 2500, vocabulary 12,000; random weights: speed does not depend on
them): xl (relative attention and dense blocks alternating), par (a stage-2 PAR
layout, A A D D D D), hybrid (relative, dense, relative, dense, a window of 16, dense),
hybrid1 (softmax at one attention place of three: relative, then two windows of 16),
linear (linear attention and dense alternating). Relative attention keeps a memory
of the context (mem_len = context), as the exports' state does.

* partf-generate: `Generator.decode`, one compiled loop (a TensorFlow graph) drawing
  greedily and feeding each token back;
* saved_model step: the export's `step` signature called once per token from Python,
  the state passed back (what decode.py does);
* saved_model loop: its `generate_ids` signature, the loop inside the graph:
  (time for 1 + 4N tokens minus time for 1) / 4N;
* litert: the LiteRT file's `step` signature the same way (XNNPACK on the CPU);
* keras-hub: `GPT2CausalLM.generate` (greedy, its cache) of a random GPT-2 of width
  128, 6 layers, 4 heads, vocabulary 12,000: (time for context + 1 + N tokens minus
  time for context + 1) / N.

Each figure is the best of --repeats runs of --tokens tokens after a warm-up run, every
kind's every path timed in turn (round-robin), so that a change of the machine's load
hits them alike.

With --train, each kind's training speed too, side by side: tokens per second of `fit`
(Adam, XLA, 10 steps per execution) on random batches of 16 x 256 tokens without XL
memory (the recall study's shape), the kinds measured round-robin, best of --repeats;
then each kind's training-speed ratio to xl beside its step's speed ratio to xl (the
export issue's target: a hybrid's step gains at least what its training gains).

Run: .venv/bin/python benchmarks/export_speed.py [--contexts 256 1024 4096]
     [--kinds xl par hybrid hybrid1 linear] [--tokens 32] [--repeats 3] [--train]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

BASE = dict(
    vocab_size=12000,
    d_model=128,
    num_heads=4,
    d_ffn=512,
    num_layers=6,
    cutoffs=(250, 2500),
    batch_size=1,
)
KINDS = {
    "xl": dict(attention="relative", architecture="A D A D A D"),
    "par": dict(attention="relative", architecture="A A D D D D"),
    "hybrid": dict(
        attention="relative",
        architecture="attention D attention D local D",
        attention_options={"window_size": 16},
    ),
    "hybrid1": dict(
        attention="relative",
        architecture="attention D local D local D",
        attention_options={"window_size": 16},
    ),
    "linear": dict(attention="linear", architecture="linear D linear D linear D"),
}


def best_of(repeats: int, run) -> float:
    run()  # warm-up: tracing, compiling, allocating
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def round_robin(runs: dict, repeats: int) -> dict:
    """The best seconds of each of `runs` (key -> a call), after a warm-up call each,
    timed in turn `repeats` times: a change of the machine's load hits every one alike."""
    for run in runs.values():
        run()  # warm-up: tracing, compiling, allocating
    best: dict = {}
    for _ in range(repeats):
        for key, run in runs.items():
            start = time.perf_counter()
            run()
            best[key] = min(best.get(key, float("inf")), time.perf_counter() - start)
    return best


def partf_run(model, prompt, tokens):
    """partf-generate's compiled loop drawing `tokens` greedily after `prompt`."""
    from partf.generation import Generator, Sampling

    generator = Generator(model, compiled=True)
    log_probs, state = generator.start(prompt)
    greedy = Sampling(temperature=0.0)
    return lambda: generator.decode(log_probs, state, tokens, greedy)


def exported_run(folder, prompt, tokens):
    """The export's `step` called once per token from Python, as decode.py does."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("decode", folder / "decode.py")
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    decoder = client.open_export(folder)
    log_probs, state = decoder.prefill(prompt, decoder.zeros())
    token = np.argmax(log_probs, axis=-1).astype(np.int32)

    def run():
        carried = state
        out = token
        for _ in range(tokens):
            lp, carried = decoder.step(out, carried)
            out = np.argmax(lp, axis=-1).astype(np.int32)

    return run


def saved_model_loop_runs(folder, prompt, count):
    """The SavedModel's own loop (`generate_ids`, greedy) for 1 and for 1 + `count`
    tokens: their difference over `count` is a token's time, the prompt's pass cancelling."""
    import tensorflow as tf

    generate_ids = tf.saved_model.load(str(folder)).signatures["generate_ids"]
    settings = dict(temperature=0.0, top_k=0, top_p=1.0, seed=0)
    return (
        lambda: generate_ids(tokens=prompt, max_tokens=1, **settings),
        lambda: generate_ids(tokens=prompt, max_tokens=1 + count, **settings),
    )


def step_ms(kinds, context, prompt, tokens, repeats, tmp) -> dict:
    """(kind, path) -> ms per token at `context`, every kind's every path timed in turn."""
    import keras

    from partf.export import export
    from partf.models import PARTransformerXL

    # Four times the tokens in the loop: the difference of two runs that each read the
    # whole prompt is noise when the steps are few (at 4,096 tokens the prompt takes seconds).
    loop_tokens = 4 * tokens
    runs, per = {}, {}
    for kind in kinds:
        keras.utils.set_random_seed(0)
        model = PARTransformerXL(BASE, **KINDS[kind], mem_len=context)
        runs[kind, "partf"] = partf_run(model, prompt, tokens)
        for fmt in ("saved_model", "litert"):
            out = Path(tmp) / f"{kind}_{context}_{fmt}"
            export(model, out, context, fmt)
            runs[kind, fmt] = exported_run(out, prompt, tokens)
            if fmt == "saved_model":
                runs[kind, "short"], runs[kind, "long"] = saved_model_loop_runs(
                    out, prompt, loop_tokens
                )
    best = round_robin(runs, repeats)
    for kind in kinds:
        per[kind] = [1000 * best[kind, path] / tokens for path in ("partf", "saved_model")]
        loop = max(best[kind, "long"] - best[kind, "short"], 0.0)
        per[kind] += [1000 * loop / loop_tokens, 1000 * best[kind, "litert"] / tokens]
    return per


def keras_hub_ms(context, tokens, repeats) -> float:
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=12000,
        num_layers=6,
        num_heads=4,
        hidden_dim=128,
        intermediate_dim=512,
        max_sequence_length=context + tokens + 1,
    )
    lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    lm.compile(sampler="greedy")
    rng = np.random.default_rng(0)
    ids = np.zeros((1, context + tokens + 1), np.int32)
    ids[0, :context] = rng.integers(1, 12000, context)
    mask = np.zeros_like(ids, bool)
    mask[0, :context] = True

    def run(stop):
        return lambda: lm.generate(
            {"token_ids": ids[:, :stop], "padding_mask": mask[:, :stop]}, stop_token_ids=None
        )

    short = best_of(repeats, run(context + 1))
    long = best_of(repeats, run(context + 1 + tokens))
    return 1000 * max(long - short, 0.0) / tokens


def train_tokens_per_second(kinds, repeats, batch=16, seq_len=256, spe=10) -> dict:
    """Each kind's training tokens/s, measured round-robin (best of `repeats` after a
    call that compiles), so that a change of the machine's load hits every kind alike."""
    import keras

    from partf.models import PARTransformerXL
    from partf.training.config import TrainConfig

    rng = np.random.default_rng(0)
    tokens = rng.integers(1, BASE["vocab_size"], size=(spe * batch, seq_len + 1))
    x, y = tokens[:, :-1].astype("int32"), tokens[:, 1:].astype("int32")
    models = {}
    for kind in kinds:
        keras.utils.set_random_seed(0)
        model = PARTransformerXL({**BASE, "batch_size": batch}, **KINDS[kind], mem_len=0)
        _, optimizer = TrainConfig(warmup_steps=10).schedule_and_optimizer(100)
        model.compile(optimizer=optimizer, jit_compile=True, steps_per_execution=spe)
        model.fit(x, y, batch_size=batch, shuffle=False, verbose=0)  # compiles
        models[kind] = model
    best: dict[str, float] = {}
    for _ in range(repeats):
        for kind, model in models.items():
            began = time.perf_counter()
            model.fit(x, y, batch_size=batch, shuffle=False, verbose=0)
            rate = len(x) * seq_len / (time.perf_counter() - began)
            best[kind] = max(best.get(kind, 0.0), rate)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no_keras_hub", action="store_true")
    parser.add_argument("--train", action="store_true", help="also each kind's training speed")
    args = parser.parse_args()

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; batch 1, {args.tokens} tokens, best of {args.repeats}"
    )
    header = ["partf-generate", "saved_model step", "saved_model loop", "litert step"]
    print(f"{'model':8} {'context':>7} " + " ".join(f"{h:>16}" for h in header))
    rng = np.random.default_rng(0)
    steps: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for context in args.contexts:
            prompt = np.concatenate([[2], rng.integers(4, 12000, context - 1)])[None].astype(
                np.int32
            )
            per = step_ms(args.kinds, context, prompt, args.tokens, args.repeats, tmp)
            for kind, row in per.items():
                print(f"{kind:8} {context:7d} " + " ".join(f"{ms:16.2f}" for ms in row), flush=True)
                steps[kind, context] = row
            if not args.no_keras_hub:
                ms = keras_hub_ms(context, args.tokens, args.repeats)
                print(f"{'gpt2-kh':8} {context:7d} keras-hub GPT-2 generate {ms:.2f}", flush=True)
    if not args.train or "xl" not in args.kinds:
        return
    rates = train_tokens_per_second(args.kinds, args.repeats)
    print("\ntraining tokens/s (16 x 256, no memory) and speed-ups over xl:")
    print(
        f"{'model':8} {'tokens/s':>9} {'train x':>8} "
        + " ".join(f"{'step x ' + str(c):>12}" for c in args.contexts)
    )
    for kind in args.kinds:
        # Speed-ups: xl's time over this kind's, per format (partf-generate, SavedModel
        # step, SavedModel loop, LiteRT step) at each context.
        ups = [
            "/".join(
                f"{a / b:.2f}" if b else "n/m"
                for a, b in zip(steps["xl", c], steps[kind, c], strict=True)
            )
            for c in args.contexts
        ]
        print(
            f"{kind:8} {rates[kind]:9.0f} {rates[kind] / rates['xl']:8.2f} "
            + " ".join(f"{u:>12}" for u in ups),
            flush=True,
        )


if __name__ == "__main__":
    main()
