#!/usr/bin/env bash
# Issue 37 on the lent H200, one device call (< 8 min): `typedlm bench roofline` on a random-weight Qwen2.5-7B (bf16,
# real Qwen2.5 vocabulary): decide, decide_many x16, decide cached, a 512-token prefill and decode steps at batch 1 and
# 32 as fractions of the H200's peaks (989 TFLOPS bf16 dense, 4.8 TB/s), the host time the GPU waits on, and the
# warm-up (static KV + CUDA graph capture; graphs and torch.compile graphs counted). Then the warm-up twice more
# without the decisions: the decode layer uncompiled (TYPEDLM_COMPILE_DECODE=0: the capture alone) and compiled again
# in a second process (inductor's on-disk caches warm): what the compiles cost of the first run's warm-up.
# Usage (repository root, .whl carried): bash bench/scripts/h200_issue37.sh   (results: "$OUT"/*.json, log on stderr)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit;
set -u
out=${OUT:-/tmp/h200-issue37}; mkdir -p "$out"; export PYTHONUNBUFFERED=1
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $?" >&2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
step 260 python3 -m typedlm bench roofline --arch qwen2.5-7b --device cuda --json "$out/roofline-h200.json" > /dev/null
TYPEDLM_COMPILE_DECODE=0 step 90 python3 -m typedlm bench roofline --arch qwen2.5-7b --device cuda --no-decisions \
    --json "$out/roofline-h200-uncompiled.json" > /dev/null
step 90 python3 -m typedlm bench roofline --arch qwen2.5-7b --device cuda --no-decisions \
    --json "$out/roofline-h200-warm-cache.json" > /dev/null
python3 - "$out" <<'PY' | tee "$out/summary.txt" >&2
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("roofline-*.json")):
    r = json.loads(f.read_text())
    w = r["warmup"]
    print(f"{f.name}: warm-up {w['warmup_s']:.1f} s ({w['graphs']} graphs, {w['compiled_graphs']} compiled; "
          + ", ".join(f"{k} slowest capture {v['slowest_s']:.1f} s, median {v['median_s']:.2f} s"
                      for k, v in w.items() if isinstance(v, dict)) + ")")
    for x in r["results"]:
        frac = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"
        dev = "n/a" if x["device_s"] is None else f"{1e3 * x['device_s']:.2f}"
        host = "n/a" if x["host_wait_s"] is None else f"{1e3 * x['host_wait_s']:.2f}"
        print(f"  {x['case']:<16} wall {1e3 * x['wall_s']:8.2f} ms  device {dev} ms  host wait {host} ms  "
              f"{x['tflops']:7.1f} TFLOPS ({frac(x['tflops_fraction'])})  {x['gb_s']:7.0f} GB/s "
              f"({frac(x['gb_s_fraction'])})  first {x['first_s']:.2f} s")
PY
ls -la "$out" >&2
