#!/usr/bin/env bash
# Issue 37 on the lent H200, one device call (< 8 min), random-weight Qwen2.5-7B (bf16, real Qwen2.5 vocabulary):
# 1. `bench roofline` first, on a cold inductor cache: decide, decide_many x16, decide cached, a 512-token prefill
#    and decode steps at batch 1 and 32 as fractions of the H200's peaks (989 TFLOPS bf16 dense, 4.8 TB/s), the host
#    time the GPU waits on, and its warm-up (30 graphs: the issue's 61.8 s row had 12, target <= 30 s; torch.compile
#    graphs counted; each capture's seconds: the first of a compiled shape holds its compile);
# 2. `bench/scripts/decode_b1_probe.py`: a b1 decode step on its own (specialized, second compile) graph vs on the
#    2-row graph, and each graph's first capture (compile included);
# 3. the same without the decisions and with the decode layer uncompiled (TYPEDLM_COMPILE_DECODE=0): the capture
#    alone, and the compiled layers' gain per step.
# Usage (repository root, .whl carried): bash bench/scripts/h200_issue37.sh   (results: "$OUT"/*.json, log on stderr)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit;
set -u
out=${OUT:-/tmp/h200-issue37}; mkdir -p "$out"; export PYTHONUNBUFFERED=1
step() { local t=$1; shift; echo "== $* ($(date +%T))" >&2; timeout "$t" "$@"; echo "== rc $?" >&2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
step 230 python3 -m typedlm bench roofline --arch qwen2.5-7b --device cuda --json "$out/roofline-h200.json" > /dev/null
step 90 python3 bench/scripts/decode_b1_probe.py "$out/decode-b1-probe-h200.json" > /dev/null
TYPEDLM_COMPILE_DECODE=0 step 80 python3 -m typedlm bench roofline --arch qwen2.5-7b --device cuda --no-decisions \
    --json "$out/roofline-h200-uncompiled.json" > /dev/null
python3 - "$out" <<'PY' | tee "$out/summary.txt" >&2
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
if (d / "decode-b1-probe-h200.json").exists():
    print("decode b1 probe:", (d / "decode-b1-probe-h200.json").read_text().replace("\n", " "))
for f in sorted(d.glob("roofline-*.json")):
    r = json.loads(f.read_text())
    w = r["warmup"]
    for part, err in r.get("errors", {}).items():
        print(f"{f.name}: {part} failed: {err}")
    print(f"{f.name}: warm-up {w['warmup_s']:.1f} s ({w['graphs']} graphs, {w['compiled_graphs']} compiled; "
          + ", ".join(f"{k} slowest capture {v['slowest_s']:.1f} s, median {v['median_s']:.2f} s"
                      for k, v in w.items() if isinstance(v, dict)) + ")")
    for k, v in w.items():
        if isinstance(v, dict):
            print(f"  {k} captures over 1 s: " + ", ".join(f"{n} {t:.1f} s" for n, t in v["spans"].items() if t > 1))
    for x in r["results"]:
        frac = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"
        ms = lambda v: "n/a" if v is None else f"{1e3 * v:.2f}"
        print(f"  {x['case']:<16} wall {1e3 * x['wall_s']:8.2f} ms  device {ms(x['device_s'])} ms  host wait "
              f"{ms(x['host_wait_s'])} ms  {x['tflops']:7.1f} TFLOPS ({frac(x['tflops_fraction'])})  "
              f"{x['gb_s']:7.0f} GB/s ({frac(x['gb_s_fraction'])})  first {x['first_s']:.2f} s")
PY
ls -la "$out" >&2
