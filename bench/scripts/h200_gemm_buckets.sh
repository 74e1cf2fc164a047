#!/usr/bin/env bash
# Issue 20 / 25 (one H200 call): check that causal query tiles in the invariant attention (else TILE_ROWS = 0 in
# this copy) and the invariant GEMM's tiles leave a row's bits alone; sweep the tiles per row-count bucket (--write:
# the table in this copy); then the checks and benches with both.
# Files: $OUT/results.tgz (re-packed after every step), $OUT/log.txt.   bash bench/scripts/h200_gemm_buckets.sh
set -u
r=$OUT/r; mkdir -p "$r"; m="1x NVIDIA H200 (lent)"; export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=0
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $? ($(date +%T))" >&2;
         tar czf "$OUT/results.tgz" -C "$r" .; }
{
step 60 python3 bench/scripts/attention_tiles.py > "$r/attention-tiles-h200.json"
if ! grep -q '"same_bits": true' "$r/attention-tiles-h200.json"; then  # tiles change bits: one query a program
  sed -i 's/^TILE_ROWS = 128 /TILE_ROWS = 0 /' typedlm/runner/invariant/triton_attention.py; echo "TILE_ROWS = 0"
fi
step 200 python3 bench/scripts/gemm_sweep.py qwen2.5-7b --write > "$r/gemm-sweep-h200-3.json"
cp typedlm/runner/invariant/gemm_configs.json "$r/"
step 90 python3 bench/gpu_check.py qwen2.5-7b invariance > "$r/gpu-invariance-h200.json"
step 50 python3 bench/scripts/score_graph_check.py qwen2.5-7b > "$r/score-graph-h200.json"
step 80 python3 -m typedlm bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 --many 16 --machine "$m" \
    --out "$r/prefix-cache-h200-6.json"
step 120 python3 -m typedlm bench decide --arch qwen2.5-7b --device cuda --invariant on,off --runs 3 --naive-runs 0 \
    --many 64 --many-runs 2 --machine "$m" --out "$r/decide-invariance-h200-5.json"
step 70 python3 bench/scripts/invariant_prefill.py qwen2.5-7b 1000,2000 > "$r/invariant-prefill-h200.json"
} 2>&1 | tee "$OUT/log.txt"
rm -rf "$r"  # all in results.tgz (at most 8 files come back)
