#!/usr/bin/env bash
# Sets up .venv (reused when present), lints with ruff, then runs the test suite.
# Extra arguments go to pytest, e.g. `./scripts/run_tests.sh -m slow`.
# The test files are spread over one worker process per core, at most 4 (pytest-xdist;
# PARTF_TEST_WORKERS=N sets the count, 0 runs everything in this process, and a `-n`
# given here wins). Each file stays on one worker, so its module-scoped fixtures
# (built models, written records) are still built once.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PARTF_EXTRAS=test
source scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
ruff check .
ruff format --check . || { echo "partf: code is not ruff-formatted; run 'ruff format .'" >&2; exit 1; }
cores="$(nproc 2>/dev/null || echo 1)"
workers="${PARTF_TEST_WORKERS:-$((cores < 4 ? cores : 4))}"
[[ "$workers" =~ ^[0-9]+$ ]] || { echo "partf: PARTF_TEST_WORKERS must be a whole number of worker processes (0 runs the tests in one process), not '$workers'" >&2; exit 2; }
if [ "$workers" -gt 1 ]; then
  python -m pytest -n "$workers" --dist loadfile "$@"
else
  python -m pytest "$@"
fi
