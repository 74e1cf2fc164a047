"""A later decision's scoring pass as a CUDA graph vs eager (issues 20, 25; runner/score_graph.py), on the lent GPU:
random-weight architecture, bf16, batch-invariant scoring on, preset support_triage, ~100-token contexts, the plan
prefix in the prefix cache. Per mode (eager; graph: the fused q/k/v and gate/up layer code; graph_modules: the
model's own layer modules in the graph): p50 wall of later decisions and their timings; across modes: max |delta|
of every field's probabilities and whether the values are the same (expected: 0.0, true). Then single passes
shaped like a later decision's (832 cached prompt tokens, then context + row-tree tokens in buckets 128 / 320 / 384
/ 512): the graph pass's logits and kept K/V vs the eager pass's, per layer code: ``equal`` (torch.equal, expected
true) and max |diff|. JSON out.

    python bench/scripts/score_graph_check.py qwen2.5-7b > bench/results/score-graph-h200.json
"""

import json
import statistics
import sys
import time

import torch

from typedlm.testing.contexts import contexts
from typedlm.testing.archs import random_engine
from typedlm.decide import decide, presets

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 6
engine = random_engine(arch, device="cuda")
runner = engine.runner
schema = presets.load(preset := "support_triage")["schema"]
ctxs = contexts(engine, runs + 1, 100, seed=7)
out = {"arch": arch, "device": torch.cuda.get_device_name(0), "invariant": runner.invariant, "preset": preset,
       "command": f"python bench/scripts/score_graph_check.py {arch} {runs}", "modes": {}}
got = {}
graphs = runner.score_graphs
for mode in ("eager", "graph", "graph_again", "graph_modules"):
    graphs.enabled = mode != "eager"
    graphs.use_fused(mode != "graph_modules")
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


for mode in ("graph", "graph_again", "graph_modules"):
    out[f"{mode}_vs_eager"] = {"max_abs_delta": max(delta(a, b) for a, b in zip(got[mode], got["eager"])),
                               "same_values": all(a.value_dict() == b.value_dict()
                                                  for a, b in zip(got[mode], got["eager"]))}
out["graph_over_eager"] = out["modes"]["graph_again"]["p50_ms"] / out["modes"]["eager"]["p50_ms"]
out["fused_over_modules"] = out["modes"]["graph_again"]["p50_ms"] / out["modes"]["graph_modules"]["p50_ms"]


def one_pass(graphed: bool, fused: bool, prompt: list[int], rows: int, cached: bool = True):
    """A decision-shaped pass: ``prompt`` (causal; its first 832 tokens cached by an eager pass, unless not
    ``cached``: then all of it in this pass, as a first call's), then ``rows`` tree tokens that see the whole prompt
    and the row before -> (logits, kept K/V)."""
    runner.prefix_cache.clear()
    graphs.enabled = False
    c = 832
    if cached:
        runner.score(prompt[:c], None, list(range(c)), torch.ones(c, c).tril().bool(), [c - 1], keep=c)
    graphs.enabled = graphed
    graphs.use_fused(fused)
    P, n = len(prompt), len(prompt) + rows
    allow = torch.zeros(n, n, dtype=torch.bool)
    allow[:, :P] = torch.ones(n, P).tril()
    for i in range(P, n):
        allow[i, max(P, i - 1):i + 1] = True
    before = graphs.passes
    logits, cache = runner.score(prompt + [7 + i % 900 for i in range(rows)], None,
                                 list(range(P)) + [P + (i % 3) for i in range(rows)], allow,
                                 [P - 1, *range(P, n)], keep=P)
    assert graphs.passes - before == int(graphed)
    return logits.float(), torch.stack([torch.stack((lay.keys[0], lay.values[0])) for lay in cache.layers]).float()


out["pass_bits"] = []
for new_tokens in (120, 282, 380, 500):
    rows = 114 if new_tokens > 114 else new_tokens // 2
    prompt = [(37 * i + 11) % 150000 + 3 for i in range(832 + new_tokens - rows)]
    ref = one_pass(False, True, prompt, rows)  # eager, on the same cached prefix
    first = one_pass(False, True, prompt, rows, cached=False)  # eager, the whole prompt (a first call's pass)
    out["pass_bits"].append({"new_tokens": new_tokens, "layer_code": "eager_uncached",
                             "logits_equal": torch.equal(first[0], ref[0]),
                             "logits_max_abs_diff": float((first[0] - ref[0]).abs().max()),
                             "kv_equal": torch.equal(first[1], ref[1]),
                             "kv_max_abs_diff": float((first[1] - ref[1]).abs().max())})
    for name in ("fused", "modules"):
        got = one_pass(True, name == "fused", prompt, rows)
        out["pass_bits"].append({"new_tokens": new_tokens, "layer_code": name,
                                 "logits_equal": torch.equal(got[0], ref[0]),
                                 "logits_max_abs_diff": float((got[0] - ref[0]).abs().max()),
                                 "kv_equal": torch.equal(got[1], ref[1]),
                                 "kv_max_abs_diff": float((got[1] - ref[1]).abs().max())})
graphs.enabled = True
graphs.use_fused(True)
out["pass_bits_all_equal"] = all(r["logits_equal"] and r["kv_equal"] for r in out["pass_bits"])
out["graphs_captured"] = len(runner.score_graphs.graphs)
out["capture_s"] = runner.score_graphs.graphs.capture_s
print(json.dumps(out, indent=1))
