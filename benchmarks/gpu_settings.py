"""Benchmark for a lent GPU: the base run's steps/s on JAX under the settings worth
trying, then the 20-epoch base run end to end, compilation included (issue 49).

Each setting is a fresh process of benchmarks/train_throughput.py's worker: partf's own
Trainer on base_model.sh's model (d_model 128, 6 blocks, memory 16, 32 x 32 tokens of
the original's training records), --steps steps, steps/s the median over one-second
windows after compilation. The settings:

    keras32       --steps_per_execution=32, Keras's Python loop of compiled steps (default)
    scan32        --compiled_loop: the 32 steps as one jax.lax.scan in one call
    scan128       the same with 128 steps per call
    scan512       the same with 512
    scan128_nocb  scan128 with XLA's command buffers (CUDA graphs) off
    scan128_mixed scan128 with --mixed_precision (float16 compute on a GPU)

Then `partf-train` with base_model.sh's flags, 20 epochs (56,540 steps), once with the
default setting and once with the fastest of the others, each timed from the command's
start to its exit: the issue's "20-epoch base run in under 60 s".

Writes gpu_settings.md and gpu_settings.json to --out_dir ($OUT on the device machine).

Run there: bash scripts/device_study.sh speed SECONDS
Here (a check of the script, not a measurement): KERAS_BACKEND=jax \
    .venv/bin/python benchmarks/gpu_settings.py --steps 64 --settings keras32 scan32 \
    --epochs 1 --full_max_steps 64 --out_dir /tmp/gpu_settings
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from shared_data import original_dir

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="
#: setting -> (steps per execution, worker flags, XLA flags added)
SETTINGS: dict[str, tuple[int, list[str], str]] = {
    "keras32": (32, [], ""),
    "scan32": (32, ["--compiled_loop"], ""),
    "scan128": (128, ["--compiled_loop"], ""),
    "scan512": (512, ["--compiled_loop"], ""),
    "scan128_nocb": (128, ["--compiled_loop"], NO_COMMAND_BUFFERS),
    "scan128_mixed": (128, ["--compiled_loop", "--mixed_precision"], ""),
}
#: base_model.sh's model and schedule, as its partf-train command line gives them.
BASE_FLAGS = [
    "--d_model=128",
    "--num_heads=4",
    "--d_ffn=512",
    "--num_layers=6",
    "--mem_len=16",
    "--dropout_rate=0.1",
    "--cutoffs=250",
    "--cutoffs=2500",
    "--proj_factor=4",
    "--max_lr=1e-4",
    "--warmup_steps=4000",
    "--tau_start=1.0",
    "--tau_end=0.1",
    "--opt_name=adam",
    "--search=par",
    "--log_every=1000",
]


def environment(xla_flags: str) -> dict[str, str]:
    env = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")}
    if xla_flags:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags}".strip()
    return env


def run_timed(command: list[str], xla_flags: str) -> tuple[subprocess.CompletedProcess, float]:
    """Runs `command` from the checkout with `xla_flags` added; (its result, seconds)."""
    began = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=environment(xla_flags), check=False
    )
    return done, time.perf_counter() - began


def error_tail(done: subprocess.CompletedProcess) -> str:
    return "\n".join(done.stderr.strip().splitlines()[-5:])


def measure(name: str, steps: int, records: Path, tokenizer: Path) -> dict[str, Any]:
    """One setting's steps/s, in a fresh process."""
    spe, flags, xla_flags = SETTINGS[name]
    steps = max(steps, 4 * spe)
    command = [
        sys.executable,
        str(HERE / "train_throughput.py"),
        "--worker",
        "--config=base",
        "--jit=on",
        f"--spe={spe}",
        f"--steps={-(-steps // spe) * spe}",
        f"--records={records / 'tfrecords_train'}",
        f"--sp_model_prefix={tokenizer}",
        *flags,
    ]
    done, seconds = run_timed(command, xla_flags)
    if done.returncode:
        return {"setting": name, "error": error_tail(done)}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "setting": name,
        "steps_per_second": result["steps_per_second"],
        "steps": result["steps"],
        "process_seconds": seconds,
    }


def full_run(
    name: str, epochs: int, records: Path, tokenizer: Path, out: Path, max_steps: int = 0
) -> dict:
    """partf-train for `epochs` epochs with a setting, timed from start to exit."""
    spe, flags, xla_flags = SETTINGS[name]
    command = [
        sys.executable,
        "-m",
        "partf.cli.train",
        *BASE_FLAGS,
        f"--epochs={epochs}",
        f"--steps_per_execution={spe}",
        *(["--compiled_loop=True"] if "--compiled_loop" in flags else []),
        *(["--mixed_precision=True"] if "--mixed_precision" in flags else []),
        f"--train_directory={records / 'tfrecords_train'}",
        f"--valid_directory={records / 'tfrecords_valid'}",
        f"--test_directory={records / 'tfrecords_test'}",
        f"--sp_model_prefix={tokenizer}",
        f"--output_dir={out / ('run-' + name)}",
        f"--model_name=base-{name}",
        *([f"--max_steps={max_steps}"] if max_steps else []),
    ]
    done, seconds = run_timed(command, xla_flags)
    row: dict[str, Any] = {"setting": name, "epochs": epochs, "seconds": seconds}
    if done.returncode:
        row["error"] = error_tail(done)
        return row
    results = sorted((out / f"run-{name}").rglob("results.json"))
    if results:
        saved = json.loads(results[-1].read_text())
        row["test_perplexity"] = saved.get("test", {}).get("perplexity")
    return row


def table(rows: list[dict], runs: list[dict], machine: str) -> str:
    lines = [f"Machine: {machine}", "", "| setting | steps/s | steps timed |", "|---|---:|---:|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['setting']} | failed (see the JSON) | |")
        else:
            lines.append(f"| {row['setting']} | {row['steps_per_second']:.1f} | {row['steps']} |")
    if runs:
        lines += [
            "",
            "| 20-epoch run | seconds, start to exit | test perplexity |",
            "|---|---:|---:|",
        ]
        for run in runs:
            ppl = run.get("test_perplexity")
            shown = "failed" if "error" in run else (f"{ppl:.2f}" if ppl else "-")
            lines.append(
                f"| {run['setting']} ({run['epochs']} epochs) | {run['seconds']:.0f} | {shown} |"
            )
    return "\n".join(lines) + "\n"


def machine() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        gpu = done.stdout.strip() or "no GPU"
    except OSError:
        gpu = "no GPU"
    import jax

    return f"{gpu}; jax {jax.__version__}, {jax.default_backend()} backend"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--steps", type=int, default=6000, help="steps per setting")
    parser.add_argument("--epochs", type=int, default=20, help="full runs' epochs (0: none)")
    parser.add_argument(
        "--full_max_steps", type=int, default=0, help="cut the full runs short (a check)"
    )
    parser.add_argument("--records", type=Path, default=original_dir())
    parser.add_argument("--out_dir", type=Path, default=Path(os.environ.get("OUT", "results")))
    args = parser.parse_args(argv)
    tokenizer = args.records / "tokenizer" / "wiki2_12k"
    if not (args.records / "tfrecords_train").is_dir():
        print(
            f"gpu_settings: {args.records}/tfrecords_train not found; set --records",
            file=sys.stderr,
        )
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.settings:
        rows.append(measure(name, args.steps, args.records, tokenizer))
        print(json.dumps(rows[-1]), flush=True)
    runs = []
    if args.epochs:
        timed = [row for row in rows if "error" not in row]
        best = max(timed, key=lambda row: row["steps_per_second"])["setting"] if timed else None
        for name in dict.fromkeys(["keras32", best]):
            if name is not None:
                cut = args.full_max_steps
                runs.append(full_run(name, args.epochs, args.records, tokenizer, args.out_dir, cut))
                print(json.dumps(runs[-1]), flush=True)
    where = machine()
    (args.out_dir / "gpu_settings.json").write_text(
        json.dumps({"machine": where, "settings": rows, "runs": runs}, indent=1)
    )
    text = table(rows, runs, where)
    (args.out_dir / "gpu_settings.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
