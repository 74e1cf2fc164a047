#!/usr/bin/env bash
# Issue 37 on the lent H200 (random-weight Qwen2.5-7B, bf16, real Qwen2.5 vocabulary), one device call (< 9 min):
# 1. `bench roofline` on a COLD compile cache (fresh TYPEDLM_COMPILE_CACHE_DIR / TRITON_CACHE_DIR): its warm-up row
#    (static KV + 30 CUDA graphs, the decode / short-prefill layers compiled with only the bucket dims dynamic:
#    typedlm/runner/compiled.py) and the fractions of peak of decide, decide_many, decide cached, prefill, decode;
# 2. the same cache dir again in a new process (`--no-decisions`): the warm-up of a restart;
# 3. `bench gen` b1 / b32 free + JSON Schema (warm cache);
# 4. `bench prefix-cache --runs 3 --many 16`, each on a cold cache (the compile-worker pool starts in that process):
#    inductor's compile workers kept (TYPEDLM_RELEASE_COMPILE_WORKERS=0), released after captures (the default),
#    and compile_threads 1 (no pool) if time is left;
# 5. if time is left, bench/scripts/sched_decide_probe.py (a decision before / after chats; cProfile, kernels).
# Usage (repository root, .whl carried): OUT=/some/dir bash bench/scripts/h200_issue37.sh  (JSON + logs.tar in $OUT)
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit
out=${OUT:-/tmp/h200-issue37}; mkdir -p "$out/logs"; export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
t0=$(date +%s)
m='1x NVIDIA H200 (lent)'
step() { local name=$1 t=$2 left; shift 2; left=$(( 525 - ($(date +%s) - t0) ))  # the call's whole: < 9 min
  [ "$t" -gt "$left" ] && t=$left; [ "$t" -lt 20 ] && { echo "== $name skipped (time)" >&2; return; }
  echo "== $name start $(( $(date +%s) - t0 )) s, limit $t s" >&2
  timeout "$t" "$@" > "$out/logs/$name.out" 2> "$out/logs/$name.err"; echo "== $name rc $? at $(( $(date +%s) - t0 )) s" >&2; }
cold() { local c; c=$(mktemp -d /tmp/tlm-cache.XXXX); echo "TYPEDLM_COMPILE_CACHE_DIR=$c/inductor TRITON_CACHE_DIR=$c/triton"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/logs/gpu.txt" 2>&1 || true
C=$(cold)
step roofline-cold 230 env $C python3 -m typedlm bench roofline --arch qwen2.5-7b --device cuda --machine "$m" \
    --json "$out/roofline-h200.json" || true
step roofline-restart 90 env $C python3 -m typedlm bench roofline --arch qwen2.5-7b --device cuda --no-decisions \
    --runs 3 --machine "$m" --json "$out/roofline-restart-h200.json" || true
step gen 120 env $C python3 -m typedlm bench gen --arch qwen2.5-7b --device cuda --batch 1 --batch 32 --no-hf \
    --no-hf-static --json "$out/gen-h200.json" || true
step prefix-keep 110 env $(cold) TYPEDLM_RELEASE_COMPILE_WORKERS=0 python3 -m typedlm bench prefix-cache \
    --arch qwen2.5-7b --device cuda --runs 3 --many 16 --machine "$m" --out "$out/prefix-cache-keep-h200.json" || true
step prefix-release 110 env $(cold) python3 -m typedlm bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 \
    --many 16 --machine "$m" --out "$out/prefix-cache-h200.json" || true
left=$(( 500 - ($(date +%s) - t0) ))
if [ "$left" -gt 60 ]; then
  step prefix-threads1 110 env $(cold) TYPEDLM_RELEASE_COMPILE_WORKERS=0 TYPEDLM_COMPILE_THREADS=1 python3 -m typedlm \
      bench prefix-cache --arch qwen2.5-7b --device cuda --runs 3 --many 16 --machine "$m" \
      --out "$out/prefix-cache-threads1-h200.json" || true
fi
left=$(( 510 - ($(date +%s) - t0) ))
if [ "$left" -gt 60 ]; then  # a decision alone / beside a started scheduler / after chats, workers released
  step probe 150 env $(cold) python3 bench/scripts/sched_decide_probe.py --arch qwen2.5-7b --runs 5 || true
  sed -n '/^{$/,$p' "$out/logs/probe.out" > "$out/sched-decide-probe-h200.json" 2>/dev/null || true
fi
python3 - "$out" <<'PY' > "$out/logs/summary.txt" 2>&1 || true
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
for f in sorted(d.glob("roofline*.json")):
    r = json.loads(f.read_text()); w = r["warmup"]
    print(f.name, "warm-up", round(w["warmup_s"], 1), "s", w["graphs"], "graphs", w["compiled_graphs"], "compiled",
          r.get("errors"))
    for x in r["results"]:
        print("  ", x["case"], round(1e3 * x["wall_s"], 2), "ms host wait", x["host_wait_s"], "tflops", x["tflops_fraction"],
              "gb/s", x["gb_s_fraction"])
for f in sorted(d.glob("prefix-cache*.json")):
    r = json.loads(f.read_text()); print(f.name, r["summary"], "pools left", r.get("compile_worker_pools"))
g = d / "gen-h200.json"
if g.exists():
    r = json.loads(g.read_text()); print("gen warm-up", r["warmup_capture_s"], "json/free", r["json_over_free"])
    for x in r["results"]:
        print("  ", {k: v for k, v in x.items() if not isinstance(v, (list, dict))})
PY
cat "$out/logs/summary.txt" >&2
mv "$out"/*.md "$out/logs/" 2>/dev/null; tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$out/logs"
ls -la "$out" >&2; echo "total $(( $(date +%s) - t0 )) s" >&2
