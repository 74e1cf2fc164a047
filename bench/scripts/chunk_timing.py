"""A decision's work chunk beside decode rows, timed (issue 34): on a random-weight architecture (bf16, invariant
scoring), after an 832-token prompt prefix, one prompt chunk of n tokens (``runner.extend_prefix``) eagerly vs
through a score graph (wall ms, median of 7, synchronized; ``equal``: the graphed chunk's K/V is the eager one's,
bit for bit), then a 4-row decode step alone, followed by a graphed 64-token chunk in the same step (the streams'
step cost with work), and with the chunk riding in the decode forward (``mixed``: runner/mixed.py; ``mixed_equal``:
its K/V and logits are the graphed chunk's, bit for bit). ``tiny`` runs the CPU test model (the graph's eager body: a smoke test). JSON out.

    python bench/scripts/chunk_timing.py qwen2.5-7b > chunk-timing-h200.json
"""

import json
import statistics
import sys
import time

import torch

from typedlm.runner.mixed import MixedStep
from typedlm.runner.prefix_cache import from_hf
from typedlm.runner.score_graph import Ride

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
if arch == "tiny":
    from typedlm.testing import tiny_engine

    engine = tiny_engine()
    engine.runner.set_invariant(True)
    engine.runner.score_graphs.enabled = True  # the graph's body, eagerly at its padded sizes
else:
    from typedlm.testing.archs import random_engine

    engine = random_engine(arch, device="cuda")
runner, graphs = engine.runner, engine.runner.score_graphs
out = {"arch": arch, "device": str(engine.device) if engine.device.type == "cpu" else torch.cuda.get_device_name(0),
       "invariant": runner.invariant, "command": f"python bench/scripts/chunk_timing.py {arch}", "chunks": []}
g = torch.Generator().manual_seed(0)
prompt = torch.randint(100, 20000, (832,), generator=g).tolist()


def timed(fn, reps=7):
    fn()
    ts = []
    for _ in range(reps):
        runner.sync()
        t0 = time.perf_counter()
        r = fn()
        runner.sync()
        ts.append(1e3 * (time.perf_counter() - t0))
    return round(statistics.median(ts), 2), r


def kv_of(past) -> torch.Tensor:
    return past if isinstance(past, torch.Tensor) else from_hf(past, 0, 0, past.layers[0].keys.shape[-2])


enabled = graphs.enabled
graphs.enabled = False
base = runner.prefill_prefix(prompt)  # eager, a transformers cache
base_kv = kv_of(base).clone()
for n in (8, 16, 32, 64, 124):
    ids = torch.randint(100, 20000, (n,), generator=g).tolist()
    row = {"tokens": n}
    try:
        graphs.enabled = False
        row["eager_ms"], e = timed(lambda: runner.extend_prefix(base_kv, ids))
        graphs.enabled = enabled
        row["graph_ms"], gr = timed(lambda: runner.extend_prefix(base_kv, ids))
        a, b = kv_of(e), kv_of(gr)
        row["equal"] = bool(torch.equal(a, b))
        row["max_abs_diff"] = float((a.float() - b.float()).abs().max())
    except Exception as ex:  # noqa: BLE001 - written down, the next size goes on
        row["error"] = f"{type(ex).__name__}: {ex}"
    out["chunks"].append(row)
    print(json.dumps(row), file=sys.stderr)

try:  # a decode step of 4 rows alone, and with one graphed 64-token chunk after it (the same stream)
    graphs.enabled = enabled
    kv = runner.decode_cache(4)
    slots = [kv.acquire() for _ in range(4)]
    runner.prefill(kv, [prompt[:200]] * 4, slots)
    runner.capture(kv, 512)
    feeds = [[7]] * 4
    for _ in range(3):
        runner.run(kv, feeds, slots)
    ids = prompt[:64]
    out["decode_step_ms"], _ = timed(lambda: runner.run(kv, feeds, slots), reps=15)
    out["decode_plus_chunk64_ms"], _ = timed(lambda: (runner.run(kv, feeds, slots),
                                                      runner.extend_prefix(base_kv, ids)), reps=15)
    fw = runner.forwards(kv)
    fw.mixed = fw.mixed or MixedStep(fw, graphs)
    m, n = int(base_kv.shape[3]), len(ids)

    def ride():
        return Ride(base_kv, ids, list(range(m, m + n)), torch.ones(n, m + n, dtype=torch.bool).tril_(m), [n - 1],
                    m + n)

    out["decode_with_riding_chunk64_ms"], r = timed(lambda: (runner.run(kv, feeds, slots, ride=(x := ride())), x)[1],
                                                    reps=15)
    with torch.inference_mode(), runner._scoring():
        g_logits, g_kv = graphs.run(base_kv, ids, list(range(m, m + n)),
                                    torch.ones(n, m + n, dtype=torch.bool).tril_(m), [n - 1], m + n)
    out["mixed_rode"] = r.out is not None
    out["mixed_equal"] = bool(r.out is not None and torch.equal(r.out[1], g_kv) and torch.equal(r.out[0], g_logits))
    for s in slots:
        kv.release(s)
except Exception as ex:  # noqa: BLE001
    out["decode_error"] = f"{type(ex).__name__}: {ex}"
out["score_graphs"] = len(graphs.graphs)
print(json.dumps(out, indent=1))
