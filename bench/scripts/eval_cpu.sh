#!/usr/bin/env bash
# The CPU evaluation runs (run folders in runs/eval-*; the summary goes to docs/benchmarks.md): default model, 200 test cases per dataset,
# parallel (labels, plus the same cases with choices permuted for the flip rate) vs naive_local.
# The three datasets run side by side; each is resumable: run this again to continue.
# OMP_NUM_THREADS=1: on the shared 2-core machine (load ~10) one decide on a 202-token tweet prompt took
# 3.9 s with 1 torch thread vs 40 s with 2 (OpenMP threads spinning against other processes).
set -u
cd "$(dirname "$0")/.."
T=${TYPEDLM:-.venv/bin/typedlm}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for d in tweets bbc bbc-multi; do
  out=runs/eval-$d
  args=(eval --data "$d" --track parallel,naive_local --modes labels --limit 200 --out "$out" --quiet)
  if [ -f "$out/manifest.json" ]; then args+=(--resume); fi
  nice -n 10 "$T" "${args[@]}" > "/tmp/eval-$d.log" 2>&1 &
done
wait
