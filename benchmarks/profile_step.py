"""Benchmark: where the compiled training step spends its time, on the CPU (TensorFlow/XLA).

Builds the model, schedule and optimizer as `partf-train` does (as
benchmarks/jax_throughput.py's `build`), compiles `fit`'s step with XLA
(`steps_per_execution` N), trains once to compile, then records a TensorFlow profile of
--steps more steps and reads it back: every XLA thunk the CPU ran (matrix products,
fusions, conditionals), with its self time (time inside it less the thunks nested in
it), summed over the Eigen worker threads. XLA's optimized HLO (dumped by the same run)
names the TensorFlow op each thunk came from; the report groups the thunks by what they
compute in the model:

    block attention, block feed-forward, LayerNorm, output layer (adaptive softmax),
    embedding, optimizer update, dropout masks, Gumbel weights, ...

each split into forward and backward (ops under `gradient_tape/`), and prints the ten
largest groups with their share of the step, and the ten largest single thunks.

Configurations:
- base: base_model.sh's model (d_model 128, 4 heads, d_ffn 512, 6 stochastic blocks of
  attention, dense and identity, memory 16), batches of 32 x 32 tokens.
- long: the long-context Transformer-XL (`A D A D A D`, memory 256), batches of 8 x 256.

Tokens are Zipf-distributed (the shapes, not the values, set the cost; the adaptive
softmax gathers each tail's rows into a block of static size).

Run: .venv/bin/python benchmarks/profile_step.py --config base long [--steps 32]
         [--json out.json]
Compare only figures taken together: pause other work on the machine while it runs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

CONFIGS = {
    "base": {
        "model": {"d_model": 128, "num_heads": 4, "d_ffn": 512, "num_layers": 6, "mem_len": 16},
        "batch": 32,
        "seq_len": 32,
    },
    "long": {
        "model": {
            "d_model": 128,
            "num_heads": 4,
            "d_ffn": 512,
            "num_layers": 6,
            "mem_len": 256,
            "architecture": "A D A D A D",
        },
        "batch": 8,
        "seq_len": 256,
    },
}
VOCAB = 12000
COMMON = {"dropout_rate": 0.1, "cutoffs": (250, 2500), "proj_factor": 4}

#: Thunks that only wait or hold others: their self time is scheduling, not work.
CONTAINERS = ("ThunkExecutor::Execute", "SlinkyThreadPool::Await")

#: What a TensorFlow op name says the op computes, first match wins: (pattern, what).
#: Layers sit in name scopes like "block_2_1/relative_0_1/"; the adaptive softmax's
#: tails run inside a custom gradient's switch, whose ops lose the layer's scope.
_LAYER = r"_\d+(?:_\d+)?/"
KINDS = [
    (r"^adam/|/adam/|optimizer|AssignAdd|AssignVariable", "optimizer update"),
    (r"adaptive_softmax|switch_case|SparseSoftmaxCrossEntropy", "output layer"),
    (r"position_embedding", "learned positions"),
    (r"embedding", "embedding"),
    # TransNormer's norm attention shares its scope name with the LayerNorms ("norm_<i>"):
    # in a model with it, its ops count as LayerNorm here.
    (
        rf"/(?:relative|softmax|linear|performer|eva|local|diag|fastformer|primal){_LAYER}",
        "attention",
    ),
    (rf"/dense{_LAYER}", "feed-forward"),
    (rf"/norm{_LAYER}", "LayerNorm"),
    (r"dropout|Dropout", "dropout masks"),
    (r"gumbel|arch_logits|Gumbel", "Gumbel block weights"),
    (rf"/block{_LAYER}", "block mixing"),
]


def what(op_name: str | None) -> tuple[str, str, str]:
    """(kind, op in the layer, "forward" or "backward") for a TensorFlow op name, the
    block index and the scopes' numbering dropped, e.g. ("attention", "key/MatMul",
    "forward")."""
    if not op_name:
        return "not attributed", "", ""
    direction = "backward" if op_name.startswith("gradient_tape/") else "forward"
    for pattern, kind in KINDS:
        match = re.search(pattern, op_name)
        if match:
            rest = op_name[match.end() :] if match.end() < len(op_name) else op_name
            rest = re.sub(r"_\d+(?=/|$)", "", rest.split("/Tensordot")[0])
            detail = rest if kind == "output layer" else "/".join(rest.split("/")[:2])
            return kind, detail, direction
    return "other", op_name, direction


def configure_dump(folder: Path) -> None:
    """XLA writes its optimized HLO into `folder` (before TensorFlow starts)."""
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_dump_to={folder} --xla_dump_hlo_as_text".strip()


def op_names(dump: Path) -> dict[str, str]:
    """HLO instruction name -> the TensorFlow op it came from, from the optimized HLO of
    the training program (the largest module XLA dumped after optimizations)."""
    files = glob.glob(str(dump / "*multi_step_on_iterator*after_optimizations.txt"))
    if not files:
        files = glob.glob(str(dump / "*after_optimizations.txt"))
    names: dict[str, str] = {}
    for path in sorted(files, key=os.path.getsize, reverse=True)[:1]:
        for line in Path(path).read_text().splitlines():
            match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name=\"([^\"]+)\"", line)
            if match:
                names.setdefault(match.group(1), match.group(2))
    return names


def self_times(xplane: Path) -> dict[str, float]:
    """HLO thunk name -> seconds of self time, summed over the worker threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(xplane.read_bytes())
    totals: dict[str, float] = defaultdict(float)
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = plane.event_metadata
        for line in plane.lines:
            if "Eigen" not in line.name:
                continue
            events = sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps))
            stack: list[list[Any]] = []  # [name, end, self]
            for event in events:
                start, end = event.offset_ps, event.offset_ps + event.duration_ps
                while stack and stack[-1][1] <= start:
                    name, _, own = stack.pop()
                    totals[name] += own
                if stack:
                    stack[-1][2] -= event.duration_ps
                stack.append([names[event.metadata_id].name, end, event.duration_ps])
            for name, _, own in stack:
                totals[name] += own
    return {name: ps / 1e12 for name, ps in totals.items() if name not in CONTAINERS}


def compiled_model(
    config: str,
    steps: int,
    spe: int,
    jit_compile: bool = True,
    attention_options: dict[str, Any] | None = None,
) -> tuple[Any, np.ndarray, np.ndarray, int]:
    """The model of `config` built and compiled as partf-train does, and `steps` batches
    of Zipf tokens: (model, inputs, targets, batch size). `attention_options`: the
    mechanisms' options (`--attn_*` flags) to build it with."""
    import keras

    from partf.models.config import ModelConfig
    from partf.models.par_transformer_xl import PARTransformerXL
    from partf.training.config import TrainConfig

    spec = CONFIGS[config]
    batch, seq_len = spec["batch"], spec["seq_len"]
    keras.utils.set_random_seed(0)
    model_config = ModelConfig(
        vocab_size=VOCAB,
        batch_size=batch,
        tau_steps=10_000,
        attention_options=attention_options or {},
        **spec["model"],
        **COMMON,
    )
    model = PARTransformerXL(model_config, name="par_transformer_xl")
    _, optimizer = TrainConfig(warmup_steps=1000).schedule_and_optimizer(10_000)
    model.compile(optimizer=optimizer, jit_compile=jit_compile, steps_per_execution=spe)
    rng = np.random.default_rng(0)
    tokens = np.minimum(rng.zipf(1.1, size=(steps * batch, seq_len + 1)), VOCAB - 1)
    return model, tokens[:, :-1].astype("int32"), tokens[:, 1:].astype("int32"), batch


def profile(config: str, steps: int, spe: int) -> dict[str, Any]:
    import tensorflow as tf

    model, x, y, batch = compiled_model(config, steps, spe)

    def run() -> float:
        began = time.perf_counter()
        model.fit(x, y, batch_size=batch, shuffle=False, epochs=1, verbose=0)
        return time.perf_counter() - began

    compile_seconds = run()
    plain = run()
    logdir = tempfile.mkdtemp(prefix="partf-profile-")
    tf.profiler.experimental.start(logdir)
    profiled = run()
    tf.profiler.experimental.stop()
    xplane = Path(sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1])
    return {
        "config": config,
        "steps": steps,
        "steps_per_execution": spe,
        "compile_and_first_seconds": compile_seconds,
        "steps_per_second": steps / plain,
        "steps_per_second_profiled": steps / profiled,
        "thunks": self_times(xplane),
    }


def report(result: dict[str, Any], names: dict[str, str]) -> str:
    thunks = result["thunks"]
    total = sum(thunks.values())
    groups: dict[str, float] = defaultdict(float)
    details: dict[str, float] = defaultdict(float)
    for name, seconds in thunks.items():
        kind, detail, direction = what(names.get(name))
        groups[f"{kind}, {direction}" if direction else kind] += seconds
        details[f"{kind} {detail}, {direction}" if direction else kind] += seconds
    per_step = 1000.0 * total / result["steps"]
    lines = [
        f"### {result['config']}: {result['steps_per_second']:.2f} steps/s unprofiled, "
        f"{per_step:.1f} ms of thunk time per step (both threads)",
        "",
        "| what | share of the step | ms per step |",
        "|---|---:|---:|",
    ]
    for kind, seconds in sorted(groups.items(), key=lambda kv: -kv[1])[:10]:
        lines.append(
            f"| {kind} | {100 * seconds / total:.1f}% | {1000 * seconds / result['steps']:.2f} |"
        )
    lines += ["", "| the ten largest costs (every block together) | share | ms per step |"]
    lines.append("|---|---:|---:|")
    for detail, seconds in sorted(details.items(), key=lambda kv: -kv[1])[:10]:
        lines.append(
            f"| {detail} | {100 * seconds / total:.1f}% | {1000 * seconds / result['steps']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs="+", choices=sorted(CONFIGS), default=["base", "long"])
    parser.add_argument("--steps", type=int, default=32, help="steps profiled (and timed)")
    parser.add_argument("--spe", type=int, default=8, help="steps per execution")
    parser.add_argument("--json", help="write the thunk times and groups here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # one configuration per process: its own XLA dump
        dump = Path(tempfile.mkdtemp(prefix="partf-hlo-"))
        configure_dump(dump)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        result = profile(args.child, args.steps, args.spe)
        result["names"] = op_names(dump)
        print(json.dumps(result))
        return 0
    import subprocess

    results = []
    for config in args.config:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                config,
                "--steps",
                str(args.steps),
                "--spe",
                str(args.spe),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(result)
        print(report(result, result["names"]), "\n", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
