#!/usr/bin/env bash
# Creates (or reuses) the virtual environment .venv and installs partf into it.
# Usage: PARTF_EXTRAS=test source scripts/setup_env.sh   (extras: "", "test", "gpu", "test,gpu")
# Extras come from a variable, not an argument: a sourced file sees its caller's "$@".
# Needs only python3 (3.10 to 3.12). Reinstalls only when setup.py changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PARTF_VENV:-$ROOT/.venv}"
EXTRAS="${PARTF_EXTRAS:-}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "partf: creating virtual environment in $VENV" >&2
  "$PYTHON" -m venv "$VENV" || {
    echo "partf: could not create a virtual environment; install python3-venv (e.g. apt-get install python3-venv) and retry." >&2
    exit 1
  }
fi

spec="."
[ -n "$EXTRAS" ] && spec=".[$EXTRAS]"
stamp="$VENV/.partf-installed-$(sha256sum "$ROOT/setup.py" | cut -c1-16)-${EXTRAS:-base}"
if [ ! -f "$stamp" ]; then
  echo "partf: installing partf$([ -n "$EXTRAS" ] && echo "[$EXTRAS]") (first run downloads TensorFlow, a few minutes)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
  (cd "$ROOT" && "$VENV/bin/python" -m pip install --quiet -e "$spec" >&2)
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
