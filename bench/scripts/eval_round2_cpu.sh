#!/usr/bin/env bash
# Issue 23's CPU evaluation runs (runs/eval-r2/): default model, the first N test cases per dataset
# (seeded order), one harness for every variant:
#   <d>          parallel (prior neutral, flip) vs naive_local (fair: bounded arrays, max_tokens from the
#                longest valid answer)
#   <d>-none     parallel, prior none (raw)           <d>-batch  parallel, prior batch (one batch of N)
#   <d>-cal      parallel, prior neutral + the bundle fitted on the calibration split (trust-runs)
#   <d>-k2/-k4   parallel, prior neutral, the first 2 / 4 train-split cases as the schema's few-shot examples
# then one side-by-side report (runs/eval-r2/README.md). Resumable: run it again to continue. OMP_NUM_THREADS=1: see bench/scripts/eval_cpu.sh.
set -u
cd "$(dirname "$0")/.."
T=${TYPEDLM:-.venv/bin/typedlm}
N=${N:-30}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
R=runs/eval-r2
mkdir -p "$R"
run() {  # out, args...
  local out=$1; shift
  local args=(eval "$@" --limit "$N" --out "$R/$out" --quiet)
  if [ -f "$R/$out/manifest.json" ]; then args+=(--resume); fi
  nice -n 10 "$T" "${args[@]}" >> "$R/log.txt" 2>&1
}
for d in ${DATASETS:-bbc-multi news-comments tweets bbc}; do
  run "$d" --data "$d" --track parallel,naive_local --modes labels
  run "$d-none" --data "$d" --track parallel --modes labels --prior none --no-flip
  run "$d-batch" --data "$d" --track parallel --modes labels --prior batch --no-flip --chunk "$N"
  if [ -f "trust-runs/$d/bundle-neutral.json" ]; then
    run "$d-cal" --data "$d" --track parallel --modes labels --calibration "trust-runs/$d/bundle-neutral.json" --no-flip
  fi
  for k in 2 4; do
    run "$d-k$k" --data "$d" --track parallel --modes labels --no-flip --examples "$k"
  done
done
nice -n 10 "$T" report $(ls -d "$R"/*/ | grep -v /report/ | sed 's#/$##') --out "$R/report" > /dev/null
