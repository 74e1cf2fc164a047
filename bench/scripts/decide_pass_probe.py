"""Probe: ``decide_many`` throughput vs the query tokens of one shared-prefix pass
(``typedlm.decide.passes.MAX_PASS_TOKENS``). The block mask is dense, so a bigger pass wastes more
attention on masked pairs while a smaller one runs smaller GEMMs. Near-tie rescoring off (scoring alone).
Random-weight architecture, bf16, ~400-token contexts, preset support_triage. Prints JSON.

    python bench/scripts/decide_pass_probe.py qwen2.5-7b 64 1024,2048,4096,8192
"""

import json
import sys
import time

import torch

from typedlm.testing.contexts import contexts
from typedlm.testing.archs import random_engine
from typedlm.decide import decide_many, presets, passes as score, ties

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 64
sizes = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "1024,2048,4096,8192").split(",")]
engine = random_engine(arch, device="cuda")
schema = presets.load("support_triage")["schema"]
ctxs = contexts(engine, n, 400)
ties.DRIFT_NATS.update({k: -1.0 for k in ties.DRIFT_NATS})
out = {"arch": arch, "device": torch.cuda.get_device_name(0), "contexts": n, "fields": len(schema.fields), "runs": {}}
for mpt in sizes:
    score.MAX_PASS_TOKENS = mpt
    decide_many(schema, ctxs, engine=engine, budget_bytes=8 << 30)
    ts = []
    for _ in range(3):
        t0 = time.perf_counter()
        ds = decide_many(schema, ctxs, engine=engine, budget_bytes=8 << 30)
        engine.sync()
        ts.append(time.perf_counter() - t0)
    t = sorted(ts)[1]
    out["runs"][mpt] = {"p50_s": t, "field_decisions_per_s": n * len(schema.fields) / t,
                        "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
    print(mpt, out["runs"][mpt], file=sys.stderr)
print(json.dumps(out, indent=1))
