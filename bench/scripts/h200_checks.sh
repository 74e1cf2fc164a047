#!/usr/bin/env bash
# One device call on the lent H200 (< 10 min): decisions beside 4 streams vs alone (bench/gpu_check.py
# invariance: max |Δ| must be 0), `bench gen` b1/b32 free + JSON with the `auto` grammar engine (through the
# backends seam), and `bench itl` (4 streams beside 2 decide clients, every decide mode the bench has).
# Usage (repository root, .whl carried; results: $OUT/checks.tgz): OUT=dir bash bench/scripts/h200_checks.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
res=/tmp/checks; mkdir -p "$res" "${OUT:=/tmp/h200-checks}"; t0=$(date +%s)
step() { local t=$1; shift; echo "== $* ($(( $(date +%s) - t0 )) s)" >&2; timeout "$t" "$@"; echo "== rc $?" >&2; }
step 150 python3 bench/gpu_check.py qwen2.5-7b invariance > "$res/gpu-invariance-h200.json" 2> "$res/gpu-invariance.log"
TYPEDLM_GRAMMAR_ENGINE=auto step 110 python3 -m typedlm bench gen --arch qwen2.5-7b --device cuda --batch 1 --batch 32 \
    --no-hf --no-hf-static --json "$res/gen-h200-auto.json" > "$res/gen-auto.txt" 2>&1
step 200 python3 -m typedlm bench itl --arch qwen2.5-7b --device cuda --max-tokens 64 --rounds 4 --decide-clients 2 \
    --json "$res/itl-h200.json" > "$res/itl.txt" 2>&1
(cd "$res" && tar czf "$OUT/checks.tgz" .); ls "$res" >&2; echo "total $(( $(date +%s) - t0 )) s" >&2
