"""Causal query tiles in the batch-invariant Triton attention (issue 20), on the lent GPU: Qwen2.5-7B's heads
(28 query heads over 4 kv heads, head size 128), bf16, random inputs. Per case: the tiled causal pass vs the
one-query-a-program kernel under the same causal mask given explicitly (a decide pass's path) and vs a few
queries alone on their own keys — ``torch.equal`` (expected: true) — and the times (ms, median,
``triton.testing.do_bench``) of SDPA (causal), the tiled pass, the one-query-a-program causal kernel and the masked
path. Prints JSON; ``same_bits`` is the verdict.

    python bench/scripts/attention_tiles.py > bench/results/attention-tiles-h200.json
"""

import json

import torch
import torch.nn.functional as F
import triton.testing

from typedlm.runner.invariant import triton_attention as ta

H, KVH, D = 28, 4, 128
CASES = [(1000, 1000), (2000, 2000), (170, 1000), (300, 1130)]  # (queries, keys): a prefill; a pass after a prefix


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")


def per_query(Q, K, V):
    tile, ta.TILE_ROWS = ta.TILE_ROWS, 0
    try:
        return ta.attention(Q, K, V, None, D ** -0.5)
    finally:
        ta.TILE_ROWS = tile


def main() -> None:
    out = {"device": torch.cuda.get_device_name(0), "heads": [H, KVH, D], "tile_rows": ta.TILE_ROWS, "cases": {}}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for q, k in CASES:
        Q = torch.randn(1, H, q, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        K, V = (torch.randn(1, KVH, k, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        allow = torch.ones(q, k, device="cuda", dtype=torch.bool).tril_(k - q)[None, None]
        tiled = ta.attention(Q, K, V, None, D ** -0.5)
        case = {"equals_masked": torch.equal(tiled, ta.attention(Q, K, V, allow, D ** -0.5)),
                "equals_per_query": torch.equal(tiled, per_query(Q, K, V)), "alone": []}
        for i in (0, 1, q // 3, q - 2, q - 1):
            n = k - q + i + 1
            alone = ta.attention(Q[:, :, i:i + 1].contiguous(), K[:, :, :n].contiguous(), V[:, :, :n].contiguous(),
                                 None, D ** -0.5)
            case["alone"].append(torch.equal(tiled[:, i], alone[:, 0]))
        sdpa = (lambda: F.scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=True)) if q == k else (
            lambda: F.scaled_dot_product_attention(Q, K, V, attn_mask=allow, enable_gqa=True))
        case["max_abs_vs_sdpa"] = float((tiled.transpose(1, 2).float() - sdpa().float()).abs().max())
        case["ms"] = {"sdpa": bench(sdpa), "tiled": bench(lambda: ta.attention(Q, K, V, None, D ** -0.5)),
                      "per_query": bench(lambda: per_query(Q, K, V)),
                      "masked": bench(lambda: ta.attention(Q, K, V, allow, D ** -0.5))}
        case["tiled_over_sdpa"] = case["ms"]["tiled"] / case["ms"]["sdpa"]
        out["cases"][f"{q}x{k}"] = case
    out["same_bits"] = all(c["equals_masked"] and c["equals_per_query"] and all(c["alone"])
                           for c in out["cases"].values())
    print(json.dumps(out, indent=1))


main()
