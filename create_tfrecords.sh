#!/usr/bin/env bash
# Builds the training records. With no arguments: unpacks the copy of WikiText-2 (word
# level) partf ships, partf/data/wikitext2/wikitext-2.tar.xz (each file checked by its sha256;
# downloaded, with mirrors, only where that file is absent), trains the 12k SentencePiece
# tokenizer on its train split and writes
#   data/wikitext-2/{train,valid,test}.txt
#   data/tokenizer/wiki2_12k.model (.vocab)
#   data/wikitext2_bsz32_seqlen32_tfrecords_{train,valid,test}/
# Needs only python3: sets up (or reuses) .venv through scripts/setup_env.sh.
#
# Environment:
#   DATA_DIR=path            your own text instead of the shipped WikiText-2: a folder with
#                            train.txt, valid.txt and test.txt, a WikiText-2 zip, or one text
#                            file (split by lines: 90% train, 5% valid, 5% test, into
#                            data/<its name>/).
#   PARTF_TRAIN_SPLIT=valid  fallback for a folder without train.txt: the tokenizer and the
#                            _train records come from valid.txt. valid.txt alone cannot support
#                            12,000 pieces, so VOCAB_SIZE defaults to 6000 then.
#   VOCAB_SIZE=N             tokenizer size (default 12000), written as wiki2_<N/1000>k.model.
#   SP_MODEL=file.model      use this existing tokenizer instead of training one.
# Extra arguments go to partf-build-data (e.g. --overwrite, --shards=4, --batch_size=16).
# Outputs that exist are kept: it says so and stops; pass --overwrite to rebuild. Outputs
# built from other text than DATA_DIR's are refused (exit 2) until --overwrite is passed.
#
# Examples:
#   ./create_tfrecords.sh
#   DATA_DIR=~/corpora/wikitext-2 ./create_tfrecords.sh --overwrite
#   DATA_DIR=~/corpora/no-train-split PARTF_TRAIN_SPLIT=valid ./create_tfrecords.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
# Checked before the set-up, which may take minutes on a fresh machine.
if [ -n "${DATA_DIR:-}" ] && [ ! -e "$DATA_DIR" ]; then
  echo "create_tfrecords.sh: error: DATA_DIR=$DATA_DIR does not exist; give a folder with train.txt, valid.txt and test.txt, a WikiText-2 zip or a text file, or leave DATA_DIR unset to use the WikiText-2 partf ships" >&2
  exit 2
fi
source scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

TRAIN_SPLIT="${PARTF_TRAIN_SPLIT:-train}"
if [ "$TRAIN_SPLIT" = "valid" ]; then
  VOCAB_SIZE="${VOCAB_SIZE:-6000}"
else
  VOCAB_SIZE="${VOCAB_SIZE:-12000}"
fi
RECORDS=data/wikitext2_bsz32_seqlen32_tfrecords
args=(--batch_size=32 --seq_len=32 --tfrecords_directory="$RECORDS" --train_split="$TRAIN_SPLIT")

if [ -n "${SP_MODEL:-}" ]; then
  TOKENIZER="$SP_MODEL"
  args+=(--sp_model_prefix="$SP_MODEL")
else
  TOKENIZER="data/tokenizer/wiki2_$((VOCAB_SIZE / 1000))k.model"
  args+=(--train_tokenizer --vocab_size="$VOCAB_SIZE" --sp_model_prefix="${TOKENIZER%.model}")
fi

if [ -z "${DATA_DIR:-}" ]; then
  args+=(--source=wikitext-2 --text_file=data/wikitext-2)
elif [ -d "$DATA_DIR" ]; then
  args+=(--text_file="$DATA_DIR" --from_directory)
elif [ -f "$DATA_DIR" ]; then
  args+=(--source="$DATA_DIR")
  case "$DATA_DIR" in *.zip) args+=(--text_file=data/wikitext-2) ;; esac
else
  echo "create_tfrecords.sh: error: DATA_DIR=$DATA_DIR is neither a folder nor a file; give a folder with train.txt, valid.txt and test.txt, a zip, or a text file" >&2
  exit 2
fi

built=1
for out in "$TOKENIZER" "${RECORDS}_train" "${RECORDS}_valid" "${RECORDS}_test"; do
  [ -e "$out" ] || built=0
done
if [ "$built" = 1 ] && [[ " $* " != *" --overwrite "* ]]; then
  # Records of other text than DATA_DIR's are not "already built": refuse, naming the fix.
  if [ -n "${DATA_DIR:-}" ]; then
    python scripts/records_source.py create_tfrecords.sh "$DATA_DIR" "$TRAIN_SPLIT" \
      "${RECORDS}_train" "${RECORDS}_valid" "${RECORDS}_test" || exit 2
  fi
  echo "partf: records already built (${RECORDS}_{train,valid,test}, $TOKENIZER); pass --overwrite to rebuild" >&2
  exit 0
fi

partf-build-data "${args[@]}" "$@"
