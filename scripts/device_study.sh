#!/usr/bin/env bash
# Runs a study plan on a lent GPU machine (JAX, no TensorFlow) from a pinned commit, in
# one prepared call, so that every row of a table comes from one commit and one backend.
#
# Here (a machine with TensorFlow, where the study's records were built once):
#   scripts/device_study.sh prepare COMMIT STUDY_DIR
#     puts into .device/ (git-ignored through .git/info/exclude): the commit's code
#     (git archive), STUDY_DIR/data's records, the WikiText-2 text and the tokenizer
#     from PARTF_SHARED_DATA, and wheels of Keras 3.15.1, namex and optree for
#     Python 3.12 (the GPU machine has JAX but not Keras).
#
# There (the device tool's `run`, with carry [".device"]):
#   bash scripts/device_study.sh run SECONDS PLAN WORKERS ARM...
#     installs the wheels, runs `partf-study PLAN --arms ARM... --workers WORKERS` on
#     JAX for at most SECONDS (then SIGTERM: every run stops at a checkpoint and the
#     report is written), and leaves $OUT/study.tar.gz (results, report, plots, logs;
#     no checkpoints). The study folder lives outside the carried path
#     (/root/partf-device-study), so a second call on a machine still warm resumes it.
#
#   bash scripts/device_study.sh speed SECONDS
#     runs benchmarks/gpu_settings.py from the carried working tree (not the pinned
#     code) on the original's records: the base run's steps/s on JAX under each GPU
#     setting, then the 20-epoch base run end to end; $OUT/gpu_settings.{md,json}.
#
# Example, the long-context study of issue 47 from c7b009c:
#   scripts/device_study.sh prepare c7b009c /work/studies/long
#   run(command="bash scripts/device_study.sh run 540 studies/long_context.toml 12 \
#        txl txl4 txl2 narrow96 narrow80 hybrid cost03 conv_drop conv_norm drop1 drop2",
#       carry=[".device"], timeout_s=600)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEVICE="$ROOT/.device"
usage() {
  echo "usage: $0 prepare COMMIT STUDY_DIR | run SECONDS PLAN WORKERS ARM... | speed SECONDS" >&2
  exit 2
}

prepare() {
  local commit="$1" study="$2"
  local shared="${PARTF_SHARED_DATA:-$ROOT/../shared/data}"
  [ -f "$study/data/records_train/metadata.json" ] \
    || { echo "partf: $study/data has no built records; run the study here once first (it builds them)" >&2; exit 2; }
  [ -d "$shared/wikitext-2" ] \
    || { echo "partf: $shared/wikitext-2 not found; set PARTF_SHARED_DATA to the shared data folder" >&2; exit 2; }
  git rev-parse --verify --quiet "$commit^{commit}" >/dev/null \
    || { echo "partf: $commit is not a commit of this repository" >&2; exit 2; }
  grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
  rm -rf "$DEVICE.partial"
  mkdir -p "$DEVICE.partial"/{code,data,shared,whl}
  git archive "$commit" | tar -x -C "$DEVICE.partial/code"
  git rev-parse "$commit" > "$DEVICE.partial/code/COMMIT"
  cp -r "$study"/data/records_* "$DEVICE.partial/data/"
  cp -r "$shared/wikitext-2" "$DEVICE.partial/shared/"
  mkdir -p "$DEVICE.partial/shared/par-transformer-xl-original"
  # The tokenizer for the studies; the records too for the GPU speed settings (15 MB).
  cp -r "$shared"/par-transformer-xl-original/{tokenizer,tfrecords_train,tfrecords_valid,tfrecords_test} \
    "$DEVICE.partial/shared/par-transformer-xl-original/"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DEVICE.partial/whl" keras==3.15.1 namex optree
  rm -rf "$DEVICE"
  mv "$DEVICE.partial" "$DEVICE"
  echo "partf: .device ready ($(du -sh "$DEVICE" | cut -f1)), code at $(cat "$DEVICE/code/COMMIT")"
}

# Puts Keras where the GPU image lacks it (it has JAX only) and `code` first on the path.
use_code() {
  local code="$1"
  if python3 -c "import keras" 2>/dev/null; then
    export PYTHONPATH="$code"
  else
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$DEVICE"/whl/*.whl
    export PYTHONPATH="$code:/tmp/site"
  fi
}

speed_there() {
  local seconds="$1"
  [ -d "$DEVICE/shared/par-transformer-xl-original/tfrecords_train" ] \
    || { echo "partf: .device has no original records; prepare it again with this script" >&2; exit 2; }
  use_code "$ROOT"
  export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 PARTF_SHARED_DATA="$DEVICE/shared"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
  timeout -s TERM -k 30 "$seconds" python3 benchmarks/gpu_settings.py \
    --out_dir "${OUT:-results/gpu_settings}" || echo "partf: speed settings stopped (exit $?)"
}

run_there() {
  local seconds="$1" plan="$2" workers="$3"
  shift 3
  [ -d "$DEVICE/code" ] || { echo "partf: .device/code missing; carry .device (prepare it first)" >&2; exit 2; }
  use_code "$DEVICE/code"
  export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
  export PARTF_SHARED_DATA="$DEVICE/shared"
  local out="${PARTF_DEVICE_STUDY_OUT:-/root/partf-device-study}"
  if [ ! -d "$out/data" ]; then mkdir -p "$out" && cp -r "$DEVICE/data" "$out/data"; fi
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
  echo "partf: code $(cat "$DEVICE/code/COMMIT"), $(python3 -c 'import jax, keras; print("jax", jax.__version__, "keras", keras.__version__)')"
  cd "$DEVICE/code"
  # SIGTERM at the limit: partf-study stops each run at a checkpoint and writes the report.
  timeout -s TERM -k 60 "$seconds" python3 -m partf.cli.study "$plan" --out "$out" \
    --workers "$workers" --arms "$@" || echo "partf: study stopped (exit $?)"
  python3 -m partf.cli.study "$plan" --out "$out" --report || true
  if [ -n "${OUT:-}" ]; then
    (cd "$out" && find . -path ./data -prune -o -path '*/checkpoints' -prune -o -type f -print \
      | tar -czf "$OUT/study.tar.gz" -T -)
    ls -la "$OUT"
  fi
}

case "${1:-}" in
  prepare) [ $# -eq 3 ] || usage; prepare "$2" "$3" ;;
  run) [ $# -ge 5 ] || usage; shift; run_there "$@" ;;
  speed) [ $# -eq 2 ] || usage; speed_there "$2" ;;
  *) usage ;;
esac
