"""Where a decode step's time goes on the GPU (issue 20 item 4): random Qwen2.5-7B bf16, StaticKV + CUDA graphs.

Per batch (1 and 32), in one process:
  * ``graph_ms``: the decode graph replayed back to back (no host work between replays): the GPU floor of a step;
  * ``gemm_ms``: the step's weight reads alone (q/k/v, o, gate/up, down for 28 layers + lm_head as plain
    ``F.linear`` calls, captured in one graph): what a step must cost at cuBLAS's bandwidth;
  * ``sched_ms``: a scheduler step (``run_batch``, free and JSON Schema; prefill left out);
  * a torch.profiler trace of 32 scheduler steps: GPU kernel time vs wall (the host gaps), top kernels
    (``OUT/profile-b{1,32}-{free,json}.txt``).
Usage: python3 bench/scripts/decode_profile.py OUT_DIR [--deterministic]"""

import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from typedlm.bench.gen import PROMPT, SCHEMA, run_typedlm
from typedlm.testing.archs import random_engine
from typedlm.grammar import make_constraint

out_dir = sys.argv[1]
deterministic = "--deterministic" in sys.argv
engine = random_engine("qwen2.5-7b", device="cuda")
if deterministic:
    from typedlm.engine import set_deterministic

    set_deterministic(engine, True)
ids = engine.encode_prompt(messages=[{"role": "user", "content": PROMPT}])
json_c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
kv = engine.runner.decode_cache(32)
t0 = time.perf_counter()
engine.runner.capture(kv, len(ids) + 128)
res = {"deterministic": deterministic, "capture_s": round(time.perf_counter() - t0, 2), "batches": {}}
run_typedlm(engine, ids, 1, 4, json_c)
run_typedlm(engine, ids, 32, 4, None)
run_typedlm(engine, ids, 32, 4, json_c)


def cuda_ms(fn, n=30) -> float:
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return round(a.elapsed_time(b) / n, 4)


model = engine.model
for b in (1, 32):
    r = {}
    with torch.inference_mode():
        fw = engine.runner.forwards(kv)
        fw._reset_inputs(b)
        r["graph_ms"] = cuda_ms(lambda: fw.graphs.replay(b, 256))
        x = torch.randn(b, model.config.hidden_size, device="cuda", dtype=torch.bfloat16)
        mats = [(w[1], w[5], w[8], w[9]) for w in fw.weights]

        def weights_only():
            for qkv, o, gu, d in mats:
                F.linear(x, qkv)
                F.linear(x, o)
                g = F.linear(x, gu)
                F.linear(g[:, : d.shape[1]], d)
            F.linear(x, model.lm_head.weight)

        g = torch.cuda.CUDAGraph()
        weights_only()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            weights_only()
        r["gemm_ms"] = cuda_ms(g.replay)
        logits = torch.randn(b, model.lm_head.weight.shape[0], device="cuda")
        r["argmax_fp32_ms"] = cuda_ms(lambda: torch.argmax(torch.stack(list(logits)), dim=1))
    for name, c in (("free", None), ("json", json_c)):
        full = run_typedlm(engine, ids, b, 128, c)
        pre = run_typedlm(engine, ids, b, 1, c)
        r[f"sched_{name}_ms"] = round((full["wall_s"] - pre["wall_s"]) * 1e3 / 127, 3)
        r[f"tok_s_{name}"] = full["tok_s"]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            torch.cuda.synchronize()
            t = time.perf_counter()
            run_typedlm(engine, ids, b, 33, c)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t
        ka = prof.key_averages()
        gpu_us = sum(e.self_device_time_total for e in ka)
        r[f"prof_{name}"] = {"wall_ms": round(wall * 1e3, 2), "gpu_kernel_ms": round(gpu_us / 1e3, 2),
                             "busy": round(gpu_us / 1e3 / (wall * 1e3), 3)}
        with open(os.path.join(out_dir, f"profile-b{b}-{name}.txt"), "w") as f:
            f.write(ka.table(sort_by="self_cuda_time_total", row_limit=25) + "\n\n"
                    + ka.table(sort_by="self_cpu_time_total", row_limit=25))
    res["batches"][b] = r
    print(json.dumps({b: r}), flush=True)
print(json.dumps(res, indent=1))
with open(os.path.join(out_dir, "decode-profile.json"), "w") as f:
    json.dump(res, f, indent=1)
