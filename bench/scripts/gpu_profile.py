"""Where a decode step's time goes on the lent GPU (issue 11): typedlm's StaticKV decode with CUDA
graphs, the decoder layer eager (``TYPEDLM_COMPILE_DECODE=0``) vs inductor-compiled (the default), at batch 1 and 32, free
and JSON Schema; then a torch.profiler trace of batch-1 steps (top CUDA kernels and host ops).
``host``: cProfile of the host side of batch-32 JSON steps.
Usage: python3 bench/scripts/gpu_profile.py [eager|compiled|host] OUT_DIR"""

import json
import os
import sys
import time

mode, out_dir = sys.argv[1], sys.argv[2]
os.environ["TYPEDLM_COMPILE_DECODE"] = "0" if mode == "eager" else "1"

import torch  # noqa: E402

from typedlm.bench.gen import PROMPT, SCHEMA, run_typedlm  # noqa: E402
from typedlm.testing.archs import random_engine  # noqa: E402
from typedlm.grammar import make_constraint  # noqa: E402

engine = random_engine("qwen2.5-7b", device="cuda")
ids = engine.encode_prompt(messages=[{"role": "user", "content": PROMPT}])
json_c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
kv = engine.runner.decode_cache(32)
t0 = time.perf_counter()
fw = engine.runner.forwards(kv)
fw.capture(len(ids) + 256, batches=[1, 32] if mode == "host" else None)  # every bucket bench gen can meet
res = {"mode": mode, "capture_s": round(time.perf_counter() - t0, 2), "graphs": len(fw.graphs), "runs": []}
run_typedlm(engine, ids, 1, 4, json_c)
for b in (1, 32):
    for name, c in (("free", None), ("json_schema", json_c)):
        r = run_typedlm(engine, ids, b, 256, c)
        res["runs"].append({"batch": b, "mode": name, "tok_s": r["tok_s"], "wall_s": r["wall_s"]})
        print(res["runs"][-1], flush=True)
if mode == "host":  # where the host time of a batch-32 JSON step goes (cProfile, 64 steps)
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    run_typedlm(engine, ids, 32, 64, json_c)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(22)
    with open(os.path.join(out_dir, "profile-host-b32-json.txt"), "w") as f:
        f.write(buf.getvalue())
    print(buf.getvalue()[:6000])
    sys.exit(0)
from torch.profiler import ProfilerActivity, profile  # noqa: E402

for name, c in (("free", None), ("json_schema", json_c)):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_typedlm(engine, ids, 1, 64, c)
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=18)
    host = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)
    with open(os.path.join(out_dir, f"profile-{mode}-{name}.txt"), "w") as f:
        f.write(table + "\n\n" + host)
    print(table[:3000], flush=True)
print(json.dumps(res, indent=1))
with open(os.path.join(out_dir, f"profile-{mode}.json"), "w") as f:
    json.dump(res, f, indent=1)
