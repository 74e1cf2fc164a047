"""The decode step's attention on the GPU, two ways (issue 20 item 4): the compiled matmul-softmax-matmul of
``runner/layers.py`` vs one SDPA kernel, Qwen2.5-7B shapes (4 KV heads, group 7, head 128), 256 columns, 28
slot buffers (one a layer, as in a step), each way captured in a CUDA graph of 28 calls.
Prints JSON (microseconds per layer call, max |difference|) and writes the faster way to OUT/attention.txt
(run on the H200: the matmul way, kept; ``bench/results/decode-attention-ab-h200.json``).
Usage: python3 bench/scripts/decode_attention_ab.py OUT_DIR"""

import json
import os
import sys

import torch
import torch.nn.functional as F

from typedlm.runner.layers import _dense_attention


def _sdpa_attention(q, kc, vc, visible, scaling: float):
    """One SDPA kernel: the group's queries as its query axis (no K/V expansion)."""
    return F.scaled_dot_product_attention(q, kc, vc, attn_mask=visible, scale=scaling)


kvh, g, hd, cols, cap, max_len = 4, 7, 128, 256, 32, 4096
ks = [torch.randn(cap, kvh, max_len + 1, hd, device="cuda", dtype=torch.bfloat16) for _ in range(28)]
vs = [torch.randn_like(k) for k in ks]
res = {}
ways = {"matmul": torch.compile(_dense_attention, dynamic=False), "sdpa": _sdpa_attention}
for b in (1, 32):
    q = torch.randn(b, kvh, g, hd, device="cuda", dtype=torch.bfloat16)
    pos = torch.randint(150, 220, (b,), device="cuda")
    visible = torch.arange(cols, device="cuda").view(1, 1, 1, cols) <= pos.view(b, 1, 1, 1)
    row, outs = {}, {}
    for name, fn in ways.items():
        def body():
            return [fn(q, k[:b, :, :cols], v[:b, :, :cols], visible, hd ** -0.5) for k, v in zip(ks, vs)]
        for _ in range(3):
            body()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs[name] = body()
        graph.replay()
        torch.cuda.synchronize()
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(50):
            graph.replay()
        e.record()
        torch.cuda.synchronize()
        row[f"{name}_us"] = round(a.elapsed_time(e) * 1e3 / 50 / 28, 2)
    row["max_abs_diff"] = max(float((x.float() - y.float()).abs().max()) for x, y in zip(outs["matmul"], outs["sdpa"]))
    res[f"b{b}"] = row
best = "sdpa" if sum(r["sdpa_us"] for r in res.values()) < sum(r["matmul_us"] for r in res.values()) else "matmul"
res["faster"] = best
print(json.dumps(res), file=sys.stderr)
with open(os.path.join(sys.argv[1], "attention.txt"), "w") as f:
    f.write(best)
with open(os.path.join(sys.argv[1], "decode-attention-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
