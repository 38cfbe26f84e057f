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

fresh=0
if [ ! -x "$VENV/bin/python" ]; then
  fresh=1
  echo "partf: creating virtual environment in $VENV" >&2
  "$PYTHON" -m venv "$VENV" || {
    echo "partf: could not create a virtual environment; install python3-venv (e.g. apt-get install python3-venv) and retry." >&2
    exit 1
  }
fi

spec="."
[ -n "$EXTRAS" ] && spec=".[$EXTRAS]"
setup_hash="$(sha256sum "$ROOT/setup.py" | cut -c1-16)"
stamp="$VENV/.partf-installed-$setup_hash-${EXTRAS:-base}"

# Whether an install of this setup.py already holds every extra asked for: the test
# suite's install (extras "test") serves base_model.sh's too, so it is not redone, and
# its message is not printed a second time.
partf_installed() {
  local done_stamp have extra covered
  for done_stamp in "$VENV/.partf-installed-$setup_hash-"*; do
    [ -f "$done_stamp" ] || continue
    have=",${done_stamp##*-"$setup_hash"-},"
    covered=1
    for extra in ${EXTRAS//,/ }; do
      [[ "$have" == *",$extra,"* ]] || covered=0
    done
    [ "$covered" = 1 ] && return 0
  done
  return 1
}

if ! partf_installed; then
  if [ "$fresh" = 1 ] || ! compgen -G "$VENV/.partf-installed-*" >/dev/null; then
    echo "partf: installing partf$([ -n "$EXTRAS" ] && echo "[$EXTRAS]") (first run downloads TensorFlow, a few minutes)" >&2
  else
    echo "partf: updating the install of partf$([ -n "$EXTRAS" ] && echo "[$EXTRAS]") (setup.py or the extras changed)" >&2
  fi
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
  (cd "$ROOT" && "$VENV/bin/python" -m pip install --quiet -e "$spec" >&2)
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
