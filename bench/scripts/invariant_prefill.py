"""Price of batch invariance on CUDA (issue 20): a bare prompt prefill with invariant scoring on vs off, and
its parts on one layer's shapes (attention: the Triton kernel vs SDPA, causal and under a decide-style mask;
the GEMMs: cuBLAS, fixed row tiles over cuBLAS, the Triton GEMM with its per-shape configs). Prints JSON (bench/results/invariant-prefill-h200.json).
``TYPEDLM_PREFIX_CACHE_GB=0 python bench/scripts/invariant_prefill.py qwen2.5-7b``"""

import json
import os
import sys

import torch
import torch.nn.functional as F

os.environ.setdefault("TYPEDLM_PREFIX_CACHE_GB", "0")  # every prefill computed, none read back
from typedlm.testing.archs import random_engine  # noqa: E402
from typedlm.bench.timing import cuda_ms as p50  # noqa: E402
from typedlm.runner.invariant import mode, ops, triton_attention, triton_ops  # noqa: E402

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-0.5b"
sizes = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [500, 1000, 2000]


def prefill_ms(engine) -> dict:
    out = {}
    gen = torch.Generator().manual_seed(0)
    for n in sizes:
        ids = torch.randint(1000, 100000, (n,), generator=gen).tolist()
        for setting in ("off", "on"):
            engine.runner.set_invariant(setting == "on")
            out[f"{n}/{setting}"] = p50(lambda: engine.runner.prefill_prefix(ids))
        out[f"{n}/on_over_off"] = out[f"{n}/on"] / out[f"{n}/off"]
    return out


def layer_ms(cfg) -> dict:
    H, kvh = cfg.num_attention_heads, cfg.num_key_value_heads
    d, hid, inter = cfg.hidden_size // H, cfg.hidden_size, cfg.intermediate_size
    dev, bf, out = "cuda", torch.bfloat16, {}
    for n in sizes:
        q = torch.randn(1, H, n, d, device=dev, dtype=bf)
        k, v = torch.randn(1, kvh, n, d, device=dev, dtype=bf), torch.randn(1, kvh, n, d, device=dev, dtype=bf)
        out[f"attn_causal/{n}/sdpa"] = p50(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                                   enable_gqa=True))
        out[f"attn_causal/{n}/triton"] = p50(lambda: triton_attention.attention(q, k, v, None, d ** -0.5))
        allow = torch.ones(n, n, device=dev, dtype=torch.bool).tril_()
        allow[n // 2:, n // 4: n // 2] = False  # a decide-like gap: later rows skip a block of keys
        add = torch.zeros(1, 1, n, n, device=dev, dtype=bf).masked_fill_(~allow, torch.finfo(bf).min)
        out[f"attn_masked/{n}/sdpa"] = p50(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=add,
                                                                                  enable_gqa=True))
        out[f"attn_masked/{n}/triton"] = p50(lambda: triton_attention.attention(q, k, v, add, d ** -0.5))
        out[f"attn_masked/{n}/triton_recompacted"] = p50(lambda: triton_attention.attention(q, k, v, add.clone(),
                                                                                            d ** -0.5))
        x = torch.randn(n, hid, device=dev, dtype=bf)
        ws = [torch.randn(o, i, device=dev, dtype=bf) * 0.02 for o, i in
              [(hid + 2 * kvh * d, hid), (hid, hid), (2 * inter, hid), (hid, inter)]]
        xs = [x, x, x, torch.randn(n, inter, device=dev, dtype=bf)]
        out[f"gemms/{n}/torch"] = p50(lambda: [F.linear(a, w) for a, w in zip(xs, ws)])
        out[f"gemms/{n}/tiled"] = p50(lambda: [ops.linear(a, w) for a, w in zip(xs, ws)])
        out[f"gemms/{n}/triton"] = p50(lambda: [triton_ops.linear(a, w) for a, w in zip(xs, ws)])  # configs:
        # the measured table (bench/scripts/gemm_sweep.py)
        g = torch.randn(hid, device=dev, dtype=bf)
        out[f"rms/{n}/torch"] = p50(lambda: g * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True)
                                                                         + 1e-6)).to(bf))
        out[f"rms/{n}/tiled"] = p50(lambda: ops.rms_norm(x, g, 1e-6))
        out[f"rms/{n}/triton"] = p50(lambda: triton_ops.rms_norm(x, g, 1e-6))
    return out


engine = random_engine(arch, device="cuda")
with torch.inference_mode():
    res = {"arch": arch, "device": torch.cuda.get_device_name(0), "prefill_ms": prefill_ms(engine),
           "one_layer_ms": layer_ms(engine.model.config)}
print(json.dumps(res, indent=1))
assert not mode.active()
