"""The four kinds of model an export must handle, tiny, and the run folders they live in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import keras

from partf.serialization import FORMAT_VERSION

VOCAB = 100
CONTEXT = 32
TINY = dict(
    vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=32, num_layers=4, cutoffs=(40,), batch_size=2
)
#: name -> the model's settings: a Transformer-XL, a stage-2 PAR model (a derived
#: architecture, attention where the search kept it), a hybrid converted to a window
#: of 16 in one block, an all-linear model; and a softmax cache.
KINDS = {
    "xl": dict(attention="relative", mem_len=CONTEXT, architecture="A D A D"),
    "par": dict(attention="relative", mem_len=CONTEXT, architecture="A A D D"),
    "hybrid": dict(
        attention="relative",
        mem_len=CONTEXT,
        architecture="attention D local D",
        attention_options={"window_size": 16},
    ),
    "linear": dict(attention="linear", mem_len=0, architecture="linear D linear D"),
    # Beyond the four: a softmax cache of the context, with rotary positions in the state.
    "softmax": dict(attention="softmax", mem_len=CONTEXT, architecture="softmax D softmax D"),
}
#: A prompt that fills the window and wraps its ring, and stays within the context.
PROMPT = [2, *range(5, 27)]
NEW_TOKENS = 6
#: Runs decode.py's functions with partf unimportable (sys.modules["partf"] = None).
NO_PARTF = Path(__file__).with_name("no_partf.py")


def tiny(kind: str):
    from partf.models import PARTransformerXL

    keras.utils.set_random_seed(sorted(KINDS).index(kind) + 21)
    return PARTransformerXL(TINY, **KINDS[kind], name=kind)


def write_run(model, run_dir: Path, sp_prefix: str | None) -> Path:
    """A run folder as partf-train leaves it: <name>.keras and config.json."""
    run_dir.mkdir(parents=True)
    model.save(run_dir / f"{run_dir.name}.keras")
    training = {"sp_model_prefix": sp_prefix} if sp_prefix else {}
    config = {"format": FORMAT_VERSION, "model": model.config.to_dict(), "training": training}
    (run_dir / "config.json").write_text(json.dumps(config))
    return run_dir


def run_without_partf(*args: str) -> subprocess.CompletedProcess:
    """no_partf.py with `args`, in a process where `import partf` fails."""
    env = {**os.environ, "PYTHONPATH": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, str(NO_PARTF), *args], capture_output=True, text=True, env=env, timeout=300
    )
