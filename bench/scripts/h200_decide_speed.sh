#!/usr/bin/env bash
# Issue 20/25 decision speed on the lent H200, one device call (random Qwen2.5-7B, bf16): sweep the invariant
# GEMM's per-shape configs and store the picks (gemm_configs.json), then check exactness and measure with them.
# Usage (from the repository root, the project on PYTHONPATH): bash bench/scripts/h200_decide_speed.sh OUT_DIR
set -u
out=${1:-/tmp/h200}; mkdir -p "$out"; m="1x NVIDIA H200 (lent)"; export PYTHONUNBUFFERED=1
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $?" >&2; }
step 80 python3 bench/scripts/gemm_sweep.py qwen2.5-7b 128,384,1024,2048 --write > "$out/gemm-sweep-h200-2.json"
step 75 python3 bench/gpu_check.py qwen2.5-7b invariance > "$out/gpu-invariance-h200.json"
step 45 python3 bench/scripts/score_graph_check.py qwen2.5-7b 6 > "$out/score-graph-h200.json"
TYPEDLM_PREFIX_CACHE_GB=0 step 45 python3 bench/scripts/invariant_prefill.py qwen2.5-7b 1000,2000 > "$out/invariant-prefill-h200.json"
step 75 python3 -m typedlm bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 --many 16 --machine "$m" \
    --out "$out/prefix-cache-h200-4.json" > /dev/null
step 90 python3 -m typedlm bench decide --arch qwen2.5-7b --device cuda --invariant on --runs 3 --naive-runs 0 \
    --many 64 --many-runs 2 --machine "$m" --out "$out/decide-h200-4.json" > /dev/null
