#!/usr/bin/env bash
# Runs a study from a pinned commit, at the lowest priority, and commits each finished
# run's record to this checkout as it appears, so that a lost machine loses time, not
# results. Run it again to resume (runs finished on this machine are skipped, the others
# resume from their newest checkpoint).
#
#   scripts/pinned_study.sh COMMIT OUT PLAN [PLAN ...] [-- STUDY_ARGS ...]
#   scripts/pinned_study.sh c8eca13 ~/studies studies/recall_mqar.toml studies/recall_text.toml
#   scripts/pinned_study.sh c8eca13 ~/studies studies/recall_mqar.toml -- --seeds 2
#
# STUDY_ARGS after -- are given to every plan's partf-study (e.g. --seeds, --arms). Without
# them, each plan runs the seeds that no machine has recorded whole (a seed's runs all come
# from one machine: partf.study.records.seed_machines), and a plan with none is skipped.
# COMMIT is checked out in a worktree beside the checkout (../pin-<commit>), which the
# runs import partf from (the checkout's .venv, PYTHONPATH set to the worktree); the
# plans run one after another, each into OUT/<plan name>, one run at a time. Every 60 s,
# records the worktree's studies wrote that this checkout lacks or holds differently are
# filed in the plan's results folder here, in their machine's folder; the report and the
# pages' generated tables are rebuilt from them (partf-study PLAN --report,
# scripts/update_pages.py), and all of it is committed, unless a page or partf/study has
# changes of its own (then it waits).
# The study runs at nice 19 and its scheduling group too (partf-study sets each run's).
# The whole script is one brace group: bash reads it all before running it, so a checkout
# or an edit of this file while a study runs leaves the running one as it was.
{
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 COMMIT OUT PLAN [PLAN ...] [-- STUDY_ARGS ...]" >&2; exit 2; }
commit="$(git rev-parse --short "$1^{commit}")"
out="$2"
shift 2
plans=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do plans+=("$1"); shift; done
[ $# -gt 0 ] && shift
study_args=("$@")
set -- "${plans[@]}"
[ $# -ge 1 ] || { echo "usage: $0 COMMIT OUT PLAN [PLAN ...] [-- STUDY_ARGS ...]" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
pin="$(dirname "$root")/pin-$commit"
python="$root/.venv/bin/python"
[ -x "$python" ] || { echo "partf: no $python; run scripts/setup_env.sh first" >&2; exit 2; }
[ -d "$pin" ] || git -C "$root" worktree add --detach "$pin" "$commit" >&2
mkdir -p "$out"

# The pages whose generated tables follow the records (scripts/update_pages.py --list).
pages() { (cd "$root" && "$python" scripts/update_pages.py --list); }

# Files the worktree's new or changed records here, each in its machine's folder
# (partf.study.records.file_records: another machine's record is never overwritten).
file_records() {
  "$python" -c 'import sys; from pathlib import Path; from partf.study.records import file_records
print(len(file_records(Path(sys.argv[1]), Path(sys.argv[2]))))' "$@"
}

sync_records() {
  local plan name results changed=0
  for plan in "$@"; do
    name="$(basename "$plan" .toml)"
    results="studies/results/$name"
    [ -d "$pin/$results/records" ] || continue
    [ "$(cd "$root" && file_records "$pin/$results/records" "$root/$results/records")" = 0 ] \
      || changed=1
  done
  [ "$changed" = 1 ] || return 0
  # Wait while someone edits what this would regenerate or commit.
  if ! git -C "$root" diff --quiet HEAD -- partf/study scripts/update_pages.py $(pages); then
    echo "pinned_study: records copied; pages or partf/study have changes of their own, commit waits" >&2
    return 0
  fi
  for plan in "$@"; do
    (cd "$root" && "$python" -m partf.cli.study "$plan" --report >/dev/null 2>&1) || true
  done
  (cd "$root" && "$python" scripts/update_pages.py) || true
  git -C "$root" add studies/results $(pages)
  if ! git -C "$root" diff --cached --quiet; then
    local runs
    runs="$(git -C "$root" diff --cached --name-only -- 'studies/results/*/records/*.json' \
      | xargs -r -n1 basename | sed 's/\.json$//' | paste -sd, -)"
    # Only these paths: whatever else is staged in the checkout stays out of it.
    git -C "$root" commit -q -m "records: ${runs:-report} (pinned $commit)" \
      -- studies/results $(pages) >&2 || true
  fi
}

watch() {
  while sleep 60; do sync_records "$@" || true; done
}

# The seeds of PLAN that no machine has recorded whole, from the records committed here (or
# in OUT's records/ for a plan that keeps no results folder): open_seeds PLAN OUT
open_seeds() {
  (cd "$root" && "$python" -c 'import sys; from pathlib import Path
from partf.study.plan import load_plan; from partf.study.records import open_seeds
print(" ".join(map(str, open_seeds(load_plan(Path(sys.argv[1])), Path(sys.argv[2])))))' "$@")
}

# This machine's folder of a records folder (partf.study.records.machine_folder).
here="$(cd "$root" && "$python" -c 'from partf.study.records import machine_folder
from partf.study.runner import machine_name; print(machine_folder(machine_name()))')"
echo 19 > /proc/self/autogroup 2>/dev/null || true
watch "$@" &
watcher=$!
trap 'kill $watcher 2>/dev/null; sync_records "$@" || true' EXIT
for plan in "$@"; do
  name="$(basename "$plan" .toml)"
  # The records committed here of this machine are done: the worktree's study skips
  # them (partf-study counts a run with a record as finished). Another machine's are not
  # given: the same run can end elsewhere on another CPU (docs/recall.md), so this
  # machine trains them again, and both records are kept.
  mine="$root/studies/results/$name/records/$here"
  if [ -d "$mine" ]; then
    mkdir -p "$pin/studies/results/$name/records"
    cp -n "$mine/"*.json "$pin/studies/results/$name/records/" 2>/dev/null || true
  fi
  args=("${study_args[@]}")
  if [ ${#args[@]} = 0 ]; then
    seeds="$(open_seeds "$plan" "$out/$name")"
    [ -n "$seeds" ] || { echo "pinned_study: $plan: every seed recorded whole" >&2; continue; }
    read -ra args <<< "--seeds $seeds"
  fi
  (cd "$pin" && PYTHONPATH="$pin" nice -n 19 "$python" -m partf.cli.study "$plan" \
    --out "$out/$name" --workers 1 "${args[@]}") || status=$?
  [ "${status:-0}" -ge 128 ] && exit "$status"  # stopped by a signal: resume next time
done
exit "${status:-0}"
}
