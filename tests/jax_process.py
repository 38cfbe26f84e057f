"""Running a script on the JAX backend from a TensorFlow test process: the backend is
fixed when Keras is imported, so the script runs in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_on_jax(source: str, tmp_path, *args: str, name: str = "on_jax") -> dict:
    """Runs the script `source` in a fresh process on the JAX backend with `args` and
    the path of a JSON file it writes last; returns that file's contents."""
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    out = tmp_path / f"{name}.json"
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, str(script), *args, str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())
