#!/usr/bin/env bash
# Reports for the committed CPU evaluation runs: one per run folder, and all three side by side.
set -eu
cd "$(dirname "$0")/.."
T=${TYPEDLM:-.venv/bin/typedlm}
for d in tweets bbc bbc-multi; do "$T" report "runs/eval-$d"; done
"$T" report runs/eval-tweets runs/eval-bbc runs/eval-bbc-multi --out runs/eval-report
