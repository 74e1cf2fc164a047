#!/usr/bin/env bash
# Issue 23's few-shot measurement (bench/results/eval-r2/<d>-k<K>): the parallel track (prior neutral, no
# flip) with the first K train-split cases of each dataset as schema examples, K = 2 and 4; K = 0 is
# <d>-none's sibling <d> (bench/eval_round2_cpu.sh). Resumable. OMP_NUM_THREADS=1: see bench/eval_cpu.sh.
set -u
cd "$(dirname "$0")/.."
T=${TYPEDLM:-.venv/bin/typedlm}
N=${N:-30}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
R=bench/results/eval-r2
mkdir -p "$R"
for d in ${DATASETS:-bbc-multi news-comments tweets bbc}; do
  for k in 2 4; do
    args=(eval --data "$d" --track parallel --modes labels --no-flip --examples "$k" --limit "$N" --out "$R/$d-k$k" --quiet)
    if [ -f "$R/$d-k$k/manifest.json" ]; then args+=(--resume); fi
    nice -n 10 "$T" "${args[@]}" >> "$R/log.txt" 2>&1
  done
done
