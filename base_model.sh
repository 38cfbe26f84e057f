#!/usr/bin/env bash
# Trains the base configuration of the original project's base_model.sh:
# d_model 128, 4 heads, d_ffn 512, 6 stochastic blocks, memory 16, dropout 0.1, adaptive
# softmax cutoffs 250 and 2500 (proj_factor 4), Adam with 4,000 warm-up steps to 1e-4 then
# cosine decay to zero, Gumbel temperature 1.0 -> 0.1, 20 epochs. The architecture logits
# follow the search preset --search=par (their own Adam rate 3e-2, weight decay 5e-4,
# frozen for the first half of the run), which makes every block decide (README "The PAR
# search"); SEARCH=original shares the model's optimizer as the original project did.
#
# On a fresh machine it sets up .venv (scripts/setup_env.sh), builds the WikiText-2
# records with ./create_tfrecords.sh if they are missing (from the copy of WikiText-2 partf
# ships, partf/data/wikitext2/, so no network is needed for the data), and trains with
# partf-train.
# Running it again resumes from the newest checkpoint of the same MODEL_NAME. At the end
# it prints the next commands (partf-generate, partf-evaluate, tensorboard, from .venv/bin)
# with the run's folder, <OUTPUT_DIR>/checkpoints/<MODEL_NAME>.
#
# Environment overrides (defaults in brackets):
#   EPOCHS [20]  MAX_STEPS [all]  MODEL_NAME [dmodel128_dffn512_blocks6]  OUTPUT_DIR [.]
#   D_MODEL [128]  NUM_HEADS [4]  D_FFN [512]  NUM_LAYERS [6]  MEM_LEN [16]
#   DROPOUT_RATE [0.1]  CUTOFF1 [250]  CUTOFF2 [2500]  PROJ_FACTOR [4]
#   MAX_LR [1e-4]  WARMUP_STEPS [4000]  TAU_START [1.0]  TAU_END [0.1]  OPT_NAME [adam]
#   STEPS_PER_EXECUTION [32]  LOG_EVERY [100]
#   SEARCH [par]  architecture-search preset (par or original, see partf-train --help)
#   EVAL_MODE [argmax]  block weights at evaluation: argmax scores the discrete
#             architecture the search found. With SEARCH=original pi stays close to
#             uniform after 20 epochs, so use EVAL_MODE=expected there (test perplexity
#             87.1 against 98.5 with argmax in the side-by-side run).
#   TRAIN_DIR, VAL_DIR, TEST_DIR [data/wikitext2_bsz32_seqlen32_tfrecords_{train,valid,test}]
#   SP_MODEL_PREFIX [data/tokenizer/wiki2_12k]
#   DATA_DIR  your own text to build the records from when they are missing, instead of
#             the shipped WikiText-2 (a folder with train.txt, valid.txt, test.txt, a
#             WikiText-2 zip, or one text file; see create_tfrecords.sh). A folder with
#             train.txt trains the 12,000-piece tokenizer as the original did on WikiText-2.
#             A folder of your own without train.txt falls back to training on valid.txt,
#             with a 6,000-piece tokenizer (PARTF_TRAIN_SPLIT=valid of create_tfrecords.sh).
#             Records that exist but were built from other text are refused (exit 2), as
#             is a DATA_DIR that does not exist: rebuild with create_tfrecords.sh --overwrite.
# Extra arguments go to partf-train (e.g. --eval_every=500 --arch_lr=1e-2).
#
# Examples:
#   ./base_model.sh
#   MAX_STEPS=200 ./base_model.sh                       # a short run
#   DATA_DIR=~/corpora/my-text ./base_model.sh
#   TRAIN_DIR=path/tfrecords_train VAL_DIR=path/tfrecords_valid TEST_DIR=path/tfrecords_test \
#     SP_MODEL_PREFIX=path/tokenizer/wiki2_12k ./base_model.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CALLER_DIR="$PWD"
cd "$ROOT"
# A DATA_DIR that does not exist is a mistake whether or not records exist: say so before
# anything is installed or built, instead of training on the records built before.
if [ -n "${DATA_DIR:-}" ] && [ ! -e "$DATA_DIR" ]; then
  echo "base_model.sh: error: DATA_DIR=$DATA_DIR does not exist; give a folder with train.txt, valid.txt and test.txt, a WikiText-2 zip or a text file, or leave DATA_DIR unset to train on the WikiText-2 partf ships" >&2
  exit 2
fi
source scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

RECORDS=data/wikitext2_bsz32_seqlen32_tfrecords
TRAIN_DIR="${TRAIN_DIR:-${RECORDS}_train}"
VAL_DIR="${VAL_DIR:-${RECORDS}_valid}"
TEST_DIR="${TEST_DIR:-${RECORDS}_test}"
SP_MODEL_PREFIX="${SP_MODEL_PREFIX:-data/tokenizer/wiki2_12k}"

# A folder without train.txt falls back to valid.txt, whose text supports only about
# 6,400 pieces, hence the smaller tokenizer. Decided on every run, not only when the records
# are built, so that a resumed run names the same tokenizer as the first.
if [ -n "${DATA_DIR:-}" ] && [ -d "$DATA_DIR" ] && [ ! -f "$DATA_DIR/train.txt" ] \
  && [ -f "$DATA_DIR/valid.txt" ]; then
  echo "partf: $DATA_DIR has no train.txt: training on valid.txt instead (put train.txt there to train on it)" >&2
  export PARTF_TRAIN_SPLIT=valid
  if [ "$SP_MODEL_PREFIX" = data/tokenizer/wiki2_12k ]; then
    SP_MODEL_PREFIX="data/tokenizer/wiki2_$((${VOCAB_SIZE:-6000} / 1000))k"
  fi
fi

# Records that exist are reused, so a DATA_DIR naming other text than they were built
# from (another corpus, or train.txt added to a folder that fell back to valid.txt) would
# otherwise be ignored without a word. metadata.json holds the sha256 of each split's text.
if [ -n "${DATA_DIR:-}" ]; then
  python scripts/records_source.py base_model.sh "$DATA_DIR" "${PARTF_TRAIN_SPLIT:-train}" \
    "$TRAIN_DIR" "$VAL_DIR" "$TEST_DIR" || exit 2
fi

if [ ! -d "$TRAIN_DIR" ] || [ ! -d "$VAL_DIR" ] || [ ! -d "$TEST_DIR" ]; then
  echo "partf: building the training records with ./create_tfrecords.sh" >&2
  # Its one error line (a damaged copy of WikiText-2, a failed download, bad text) names
  # the fix; nothing is added to it.
  ./create_tfrecords.sh || exit
fi

args=(
  --train_directory="$TRAIN_DIR"
  --valid_directory="$VAL_DIR"
  --test_directory="$TEST_DIR"
  --sp_model_prefix="$SP_MODEL_PREFIX"
  --d_model="${D_MODEL:-128}"
  --num_heads="${NUM_HEADS:-4}"
  --d_ffn="${D_FFN:-512}"
  --num_layers="${NUM_LAYERS:-6}"
  --mem_len="${MEM_LEN:-16}"
  --dropout_rate="${DROPOUT_RATE:-0.1}"
  --cutoffs="${CUTOFF1:-250}"
  --cutoffs="${CUTOFF2:-2500}"
  --proj_factor="${PROJ_FACTOR:-4}"
  --straight_through=False
  --max_lr="${MAX_LR:-1e-4}"
  --warmup_steps="${WARMUP_STEPS:-4000}"
  --tau_start="${TAU_START:-1.0}"
  --tau_end="${TAU_END:-0.1}"
  --tau_is_trainable=False
  --search="${SEARCH:-par}"
  --eval_mode="${EVAL_MODE:-argmax}"
  --opt_name="${OPT_NAME:-adam}"
  --epochs="${EPOCHS:-20}"
  --model_name="${MODEL_NAME:-dmodel128_dffn512_blocks6}"
  --output_dir="${OUTPUT_DIR:-.}"
  --steps_per_execution="${STEPS_PER_EXECUTION:-32}"
  --log_every="${LOG_EVERY:-100}"
)
[ -n "${MAX_STEPS:-}" ] && args+=(--max_steps="$MAX_STEPS")

# The run's folders, as partf-train names them: checkpoints/<model_name> and
# logs/<model_name> under --output_dir; flags given to this script win, as there.
model_name="${MODEL_NAME:-dmodel128_dffn512_blocks6}"
output_dir="${OUTPUT_DIR:-.}"
previous=""
for arg in "$@"; do
  case "$arg" in
    --model_name=*) model_name="${arg#*=}" ;;
    --output_dir=*) output_dir="${arg#*=}" ;;
  esac
  case "$previous" in
    --model_name) model_name="$arg" ;;
    --output_dir) output_dir="$arg" ;;
  esac
  previous="$arg"
done
under() { if [ "$output_dir" = . ]; then echo "$1"; else echo "${output_dir%/}/$1"; fi; }
venv_bin="${VENV:-$ROOT/.venv}/bin"
venv_bin="${venv_bin#"$ROOT"/}"

echo "=== partf: training the base configuration into $(under "checkpoints/$model_name") ===" >&2
# Not exec'd, so that the next commands can be printed when training ends. partf-train
# runs as a job of its own (set -m): a terminal's Ctrl-C then reaches it once, through the
# trap, as a supervisor's SIGTERM to this script does; it checkpoints and exits 128 + N.
set -m
partf-train "${args[@]}" "$@" &
train_pid=$!
trap 'kill -INT "$train_pid" 2>/dev/null || true' INT
trap 'kill -TERM "$train_pid" 2>/dev/null || true' TERM HUP
while :; do
  # wait returns early (status > 128) when a trapped signal arrives; wait again until
  # partf-train has written its checkpoint and exited.
  wait "$train_pid" && status=0 || status=$?
  kill -0 "$train_pid" 2>/dev/null || break
done
trap - INT TERM HUP
[ "$status" = 0 ] || exit "$status"

{
  echo "=== partf: done: the run is in $(under "checkpoints/$model_name") ==="
  echo "Next (the commands are in $venv_bin; or first: source $venv_bin/activate):"
  [ "$CALLER_DIR" = "$ROOT" ] || echo "  cd $ROOT"
  echo "  $venv_bin/partf-generate --model $(under "checkpoints/$model_name") --prompt \"= valkyria chronicles =\" --max_tokens 60 --temperature 0.8 --top_p 0.9 --seed 1"
  echo "  $venv_bin/partf-evaluate --model $(under "checkpoints/$model_name") --records $TEST_DIR"
  echo "  $venv_bin/tensorboard --logdir $(under logs)"
} >&2
