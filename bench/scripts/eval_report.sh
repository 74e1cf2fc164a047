#!/usr/bin/env bash
# Reports for the committed CPU evaluation runs: one per run folder, and all three side by side.
set -eu
cd "$(dirname "$0")/.."
T=${TYPEDLM:-.venv/bin/typedlm}
for d in tweets bbc bbc-multi; do "$T" report "bench/results/eval-$d"; done
"$T" report bench/results/eval-tweets bench/results/eval-bbc bench/results/eval-bbc-multi --out bench/results/eval-report
