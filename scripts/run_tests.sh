#!/usr/bin/env bash
# Sets up .venv (reused when present), lints with ruff, then runs the test suite.
# Extra arguments go to pytest, e.g. `./scripts/run_tests.sh -m slow`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PARTF_EXTRAS=test
source scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
ruff check .
ruff format --check . || { echo "partf: code is not ruff-formatted; run 'ruff format .'" >&2; exit 1; }
python -m pytest "$@"
