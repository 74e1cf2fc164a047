#!/usr/bin/env bash
# Before/after on the lent H200 in one device call (< 10 min): the same benches on the base tree (.base/, a
# `git archive` of the commit before the change, carried) and on this tree: `bench gen` b1/b32 free + JSON,
# `bench decide` (64-context decide_many), `bench prefix-cache`. Random Qwen2.5-7B shape, bf16.
# Usage (repository root, .whl and .base carried; results: $OUT/ab.tgz): OUT=dir bash bench/scripts/h200_ab.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
out=/tmp/ab-results; mkdir -p "$out" "${OUT:=/tmp/h200-ab}"; m="1x NVIDIA H200 (lent)"; export PYTHONUNBUFFERED=1
t0=$(date +%s)
step() { local t=$1; shift; echo "== $* ($(( $(date +%s) - t0 )) s)" >&2; timeout "$t" "$@"; echo "== rc $?" >&2; }
for tree in base new; do
    if [ $tree = base ]; then src=$PWD/.base; else src=$PWD; fi
    export PYTHONPATH=/tmp/site:$src
    (cd /tmp && step 100 python3 -m typedlm bench gen --arch qwen2.5-7b --device cuda --batch 1 --batch 32 --no-hf \
        --no-hf-static --json "$out/gen-$tree.json" > "$out/gen-$tree.txt" 2>&1)
    (cd /tmp && step 100 python3 -m typedlm bench decide --arch qwen2.5-7b --device cuda --runs 3 --naive-runs 0 \
        --many 64 --many-runs 2 --machine "$m" --out "$out/decide-$tree.json" > "$out/decide-$tree.txt" 2>&1)
    (cd /tmp && step 80 python3 -m typedlm bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 --many 16 \
        --machine "$m" --out "$out/prefix-$tree.json" > "$out/prefix-$tree.txt" 2>&1)
done
(cd "$out" && tar czf "$OUT/ab.tgz" .); ls "$out" >&2
echo "total $(( $(date +%s) - t0 )) s" >&2
