#!/usr/bin/env bash
# Issue 34, session 11, on the lent H200 (random Qwen2.5-7B shape, bf16), one device call, < 9 minutes: decisions'
# work chunks through score graphs, one work forward every other step beside decode rows, and (opt-in,
# TYPEDLM_MIXED_STEP=1) the chunk riding in the decode step's forward (runner/mixed.py).
# (1) bench itl: alone, decide-alone, beside (default 128/1), beside@64/1, with the engine's step times;
# (2) the same with mixed steps; (3) a prompt chunk eager vs graphed, a decode step alone / + a graphed chunk /
#     with the chunk riding (chunk_timing.py); (4) decisions beside 4 streams vs alone, bit for bit, mixed steps on
#     (gpu_check invariance); (5) bench gen b1/b32 free + JSON after, then before (main's package: this branch's
#     patch reversed); (6) while time is left: a diagnostic, not a setting: bench itl alone/beside with the
#     interpreter's switch interval at 0.5 ms (GIL hand-offs), bench decide, bench prefix-cache.
# JSON results under $OUT/, a log on stderr.
# Usage (repository root): OUT=/some/dir bash bench/scripts/h200_issue34_s11.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit
out=${OUT:-/tmp/h200-issue34}; mkdir -p "$out"; m="1x NVIDIA H200 (lent)"; export PYTHONUNBUFFERED=1
repo=$PWD; t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $? after $(elapsed) s" >&2; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$out/gpu.csv" 2>&1
itl="--arch qwen2.5-7b --device cuda --max-tokens 64 --rounds 4 --decide-clients 2"
# 1. the issue's headline (~130 s)
step 200 python3 -m typedlm bench itl $itl --mode alone --mode decide-alone --mode beside --mode beside@64/1 \
    --json "$out/itl-h200.json" > /dev/null
# 2. the same with a decision's chunk riding in the decode forward (~150 s: 60 more graphs at warm-up)
TYPEDLM_MIXED_STEP=1 step 220 python3 -m typedlm bench itl $itl --mode alone --mode decide-alone --mode beside \
    --mode beside@64/1 --json "$out/itl-mixed-h200.json" > /dev/null
# 3. one chunk, eager vs graphed vs riding; a decode step with and without one (~50 s)
step 100 python3 bench/scripts/chunk_timing.py qwen2.5-7b > "$out/chunk-timing-h200.json"
# 4. decisions beside streams = alone, chunks riding decode forwards (~60 s)
TYPEDLM_MIXED_STEP=1 step 100 python3 bench/gpu_check.py qwen2.5-7b invariance > "$out/gpu-invariance-h200.json"
# 5. no regression: generation after, then before (main: this branch's package patch reversed) (~70 s each)
step 110 python3 -m typedlm bench gen --arch qwen2.5-7b --device cuda --batch 1 --batch 32 --no-hf --no-hf-static \
    --json "$out/gen-after-h200.json" > /dev/null
mkdir -p /tmp/before && cp -r typedlm /tmp/before/ && (cd /tmp/before && patch -s -p1 -R < "$repo/bench/scripts/issue34_s11.patch") \
    && (cd /tmp/before && export PYTHONPATH=/tmp/site:/tmp/before && step 110 python3 -m typedlm bench gen \
        --arch qwen2.5-7b --device cuda --batch 1 --batch 32 --no-hf --no-hf-static \
        --json "$out/gen-before-h200.json" > /dev/null) || true
# 6. diagnostic: the same bench with a 0.5 ms switch interval (GIL hand-offs), only while time is left
if [ "$(elapsed)" -lt 380 ]; then
    step 110 python3 -c "import sys; sys.setswitchinterval(0.0005); sys.argv = ['typedlm'] + sys.argv[1:]
from typedlm.cli.main import app; app()" bench itl $itl --mode alone --mode beside --json "$out/itl-switch-h200.json" \
        > /dev/null
fi
# 7. decide and the prefix cache, only while the whole call stays under 9 minutes
if [ "$(elapsed)" -lt 420 ]; then
    step 70 python3 -m typedlm bench decide --arch qwen2.5-7b --device cuda --runs 3 --naive-runs 0 --many 64 \
        --many-runs 2 --machine "$m" --out "$out/decide-h200.json" > /dev/null
fi
if [ "$(elapsed)" -lt 470 ]; then
    step 60 python3 -m typedlm bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 --many 16 --machine "$m" \
        --out "$out/prefix-cache-h200.json" > /dev/null
fi
echo "total $(elapsed) s" >&2
