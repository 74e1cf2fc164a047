#!/usr/bin/env bash
# Issue 25 (brief 25g) on the lent H200, random Qwen2.5-7B bf16: a later decision's graphed pass with 64-token buckets
# above 256, fused q/k/v + gate/up GEMMs and the RoPE kernel; host cuts (score_trie on floats, the row tree, prompt
# record and the prompt's shared part once per plan). Two device calls (each < 10 min):
#   bash bench/h200_issue25g.sh 1   # bits (graph vs eager, per layer code), prefix-cache bench, A/B fused off, profile
#   bash bench/h200_issue25g.sh 2   # GEMM sweep at rows 320/384/448/512 (--write: this copy's table), bits and bench again
# Files: $OUT/results.tgz (re-packed after every step), $OUT/log.txt; part 2 also $OUT/gemm_configs.json (commit it
# if the bench improves and pass_bits_all_equal is true).
set -u
part=${1:-1}; r=$OUT/r; mkdir -p "$r"; m="1x NVIDIA H200 (lent)"; export PYTHONUNBUFFERED=1
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $? ($(date +%T))" >&2;
         tar czf "$OUT/results.tgz" -C "$r" .; }
pc=(python3 -m typedlm bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 --many 16 --machine "$m" --out)
{
if [ "$part" = 1 ]; then
  step 170 python3 bench/score_graph_check.py qwen2.5-7b 6 > "$r/score-graph-h200-25g.json"
  grep -E '"(pass_bits_all_equal|fused_over_modules|graph_over_eager|max_abs_delta)"' "$r/score-graph-h200-25g.json"
  step 100 "${pc[@]}" "$r/prefix-cache-h200-25g.json"
  TYPEDLM_SCORE_GRAPH_FUSED=0 step 100 "${pc[@]}" "$r/prefix-cache-h200-25g-unfused.json"
  step 120 python3 bench/decide_profile.py qwen2.5-7b 16 > "$r/profile-decide-h200-25g.txt"
else
  step 260 python3 bench/gemm_sweep.py qwen2.5-7b --write > "$r/gemm-sweep-h200-5.json"
  cp typedlm/runner/invariant/gemm_configs.json "$r/" && cp typedlm/runner/invariant/gemm_configs.json "$OUT/"
  step 170 python3 bench/score_graph_check.py qwen2.5-7b 6 > "$r/score-graph-h200-25g-sweep.json"
  grep -E '"(pass_bits_all_equal|fused_over_modules|graph_over_eager|max_abs_delta)"' "$r/score-graph-h200-25g-sweep.json"
  step 100 "${pc[@]}" "$r/prefix-cache-h200-25g-sweep.json"
fi
} 2>&1 | tee "$OUT/log.txt"
rm -rf "$r"
