#!/usr/bin/env bash
# Issue 34 on the lent H200 (random Qwen2.5-7B shape, bf16), one device call, < 9 minutes: decisions as work of the
# engine's steps. (1) streams beside decisions (bench itl: alone, decide-alone, then beside at step budgets 128, 256
# (the default) and 512), (2) generation b1/b32 free + JSON (bench gen: no regression), (3) decisions beside 4
# streams vs alone, bit for bit (gpu_check invariance: their prefills and passes go in chunks), then, while time
# is left, (4) bench decide and bench prefix-cache. JSON results under $OUT/, a log on stderr.
# Usage (repository root): OUT=/some/dir bash bench/scripts/h200_issue34.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit
out=${OUT:-/tmp/h200-issue34}; mkdir -p "$out"; m="1x NVIDIA H200 (lent)"; export PYTHONUNBUFFERED=1
t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $? after $(elapsed) s" >&2; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$out/gpu.csv" 2>&1
# 1. the issue's headline: 4 streams beside 2 decide clients, one run per step budget (~170 s)
step 200 python3 -m typedlm bench itl --arch qwen2.5-7b --device cuda --max-tokens 64 --rounds 4 --decide-clients 2 \
    --mode alone --mode decide-alone --mode beside --mode beside@128 --mode beside@512 --json "$out/itl-h200.json" \
    > /dev/null
# 2. no regression: generation b1 / b32, free and JSON (the bench runs both kinds) (~80 s)
step 100 python3 -m typedlm bench gen --arch qwen2.5-7b --device cuda --batch 1 --batch 32 --no-hf --no-hf-static \
    --json "$out/gen-h200.json" > /dev/null
# 3. decisions beside streams (through the scheduler, chunked) = alone, max |diff| 0 with invariant scoring (~60 s)
step 80 python3 bench/gpu_check.py qwen2.5-7b invariance > "$out/gpu-invariance-h200.json"
# 4. decide and the prefix cache, only while the whole call stays under 9 minutes
if [ "$(elapsed)" -lt 330 ]; then
    step 80 python3 -m typedlm bench decide --arch qwen2.5-7b --device cuda --runs 3 --naive-runs 0 --many 64 \
        --many-runs 2 --machine "$m" --out "$out/decide-h200.json" > /dev/null
fi
if [ "$(elapsed)" -lt 430 ]; then
    step 70 python3 -m typedlm bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 --many 16 --machine "$m" \
        --out "$out/prefix-cache-h200.json" > /dev/null
fi
echo "total $(elapsed) s" >&2
