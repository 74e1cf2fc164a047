#!/usr/bin/env bash
# Issue 23 round 3 (runs/eval-r3/): options chosen on validation, reported on test, default model, CPU.
#   <d>-naive[N]  naive_local (fair) on the first N test cases (tweets also 400, news-comments also 200)
#   <d>-select    typedlm select: k = 0/2/4 train examples x prior neutral/none/batch x +/- bundle, scored on the
#                 first FIT calibration cases (+cal: 5-fold CV), the best applied to the first TEST test cases;
#                 scores-k0.jsonl starts as a copy of trust-runs/<d>/scores.jsonl (bbc-multi: trust/r3)
# then `typedlm report` per select folder and the table (bench/scripts/select_table.py). Resumable (scores files).
set -u
cd "$(dirname "$0")/.."
T=${TYPEDLM:-.venv/bin/typedlm}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
R=runs/eval-r3
naive() {  # dataset N suffix
  local args=(eval --data "$1" --track naive_local --limit "$2" --out "$R/$1-naive$3" --quiet)
  [ -f "$R/$1-naive$3/manifest.json" ] && args+=(--resume)
  nice -n 10 "$T" "${args[@]}"
}
for d in tweets bbc bbc-multi news-comments; do naive "$d" 100 ""; done
naive tweets 400 400
naive news-comments 200 200
for spec in tweets:300:800:-naive400 bbc:300:428:-naive bbc-multi:150:200:-naive news-comments:150:200:-naive200; do
  IFS=: read d fit test nv <<< "$spec"
  mkdir -p "$R/$d-select"
  src=trust-runs/$d/scores.jsonl; [ "$d" = bbc-multi ] && src=trust-runs/r3/bbc-multi/scores.jsonl
  [ -f "$R/$d-select/scores-k0.jsonl" ] || cp "$src" "$R/$d-select/scores-k0.jsonl"
  nice -n 10 "$T" select --data "$d" --fit-limit "$fit" --test-limit "$test" --examples 0,2,4 \
    --naive "$R/$d$nv" --out "$R/$d-select"
  nice -n 10 "$T" report "$R/$d-select" > /dev/null
done
PYTHONPATH=. python bench/scripts/select_table.py "$R"/*-select > "$R/table.md"
