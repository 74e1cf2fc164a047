"""Issue 37, warm-up: a batch-1 decode step on its own 1-row CUDA graph vs on the 2-row graph (one padding row
writing the scratch column), and each graph's first capture, compile included (a warm inductor cache makes it
cheaper). Random Qwen2.5-7B bf16, StaticKV, the compiled decode layer, a 512-token prompt, column bucket 1024.
torch.compile specializes one row, so the 1-row graph is a second inductor compile at warm-up; a b1 step run on the
2-row graph would need none.
Usage: python3 bench/scripts/decode_b1_probe.py OUT.json"""

import json
import sys
import time

import torch

from typedlm.testing.archs import random_engine

engine = random_engine("qwen2.5-7b", device="cuda")
runner = engine.runner
kv = runner.decode_cache(2)
fw = runner.forwards(kv)
ids = torch.randint(1000, 20000, (512,), generator=torch.Generator().manual_seed(0)).tolist()
slot = kv.acquire()
runner.prefill(kv, [ids], [slot])
cols, out = 1024, {"prompt_tokens": 512, "columns": 1024, "capture_s": {}, "step_ms": {}}
with kv.lock, torch.inference_mode():
    for b in (2, 1):  # the rows-2+ graph first, as warm-up captures (largest first)
        t0 = time.perf_counter()
        fw.graphs.get(b, cols)
        torch.cuda.synchronize()
        out["capture_s"][f"b{b}"] = time.perf_counter() - t0
    for b in (1, 2):
        fw._io[0, :b] = ids[0]
        fw._io[1, 0] = 512  # row 0 writes column 512 (again at every replay); a padding row the scratch column
        fw._io[1, 1:b] = kv.max_len
        graph = fw.graphs.graphs[(b, cols)][0]
        for _ in range(20):
            graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        out["step_ms"][f"b1 on the {b}-row graph"] = start.elapsed_time(end) / 200
out["padded_over_own"] = out["step_ms"]["b1 on the 2-row graph"] / out["step_ms"]["b1 on the 1-row graph"]
print(json.dumps(out, indent=2))
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=2)
