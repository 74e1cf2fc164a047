"""A later decision's scoring pass as a CUDA graph vs eager (issues 20, 25; runner/score_graph.py), on the lent GPU:
random-weight architecture, bf16, batch-invariant scoring on, preset support_triage, ~100-token contexts, the plan
prefix in the prefix cache. Per mode (eager, graph): p50 wall of later decisions and their timings; across modes:
max |delta| of every field's probabilities and whether the values are the same (expected: 0.0, true). JSON out.

    python bench/score_graph_check.py qwen2.5-7b > bench/results/score-graph-h200.json
"""

import json
import statistics
import sys
import time

import torch

from typedlm.bench.decide import contexts
from typedlm.bench.models import random_engine
from typedlm.decide import decide, presets

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 6
engine = random_engine(arch, device="cuda")
runner = engine.runner
schema = presets.load(preset := "support_triage")["schema"]
ctxs = contexts(engine, runs + 1, 100, seed=7)
out = {"arch": arch, "device": torch.cuda.get_device_name(0), "invariant": runner.invariant, "preset": preset,
       "command": f"python bench/score_graph_check.py {arch} {runs}", "modes": {}}
got = {}
for mode in ("eager", "graph", "graph_again"):
    runner.score_graphs.enabled = mode != "eager"
    runner.prefix_cache.clear()
    decide(schema, ctxs[-1], engine=engine)  # the first call on the schema: the plan prefix stored (and the prior)
    walls, timings, decs = [], [], []
    before = runner.score_graphs.passes
    for c in ctxs[:runs]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        d = decide(schema, c, engine=engine)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
        timings.append(d.timings)
        decs.append(d)
    got[mode] = decs
    out["modes"][mode] = {"p50_ms": statistics.median(walls) * 1e3, "walls_ms": [w * 1e3 for w in walls],
                          "graphed_passes": runner.score_graphs.passes - before, "timings": timings[-1],
                          "cached_prompt_tokens": decs[-1].usage["cached_prompt_tokens"],
                          "prompt_tokens": decs[-1].usage["prompt_tokens"]}


def delta(a, b) -> float:
    worst = 0.0
    for f in a.fields:
        pa, pb = a.fields[f].probabilities, b.fields[f].probabilities
        worst = max([worst, *(abs(pa[k] - pb[k]) for k in pa)])
    return worst


for mode in ("graph", "graph_again"):
    out[f"{mode}_vs_eager"] = {"max_abs_delta": max(delta(a, b) for a, b in zip(got[mode], got["eager"])),
                               "same_values": all(a.value_dict() == b.value_dict()
                                                  for a, b in zip(got[mode], got["eager"]))}
out["graph_over_eager"] = out["modes"]["graph_again"]["p50_ms"] / out["modes"]["eager"]["p50_ms"]
out["graphs_captured"] = len(runner.score_graphs.graphs)
out["capture_s"] = runner.score_graphs.graphs.capture_s
print(json.dumps(out, indent=1))
