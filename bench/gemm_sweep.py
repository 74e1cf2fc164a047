"""Sweep the batch-invariant Triton GEMM's config per weight shape (issue 20): for every ``(N, K)`` a decision's
prefill multiplies by (a random-weight architecture's q/k/v/o, gate/up/down, lm_head, and the fused q/k/v and
gate/up of the static decode), time each candidate config at several row counts against cuBLAS (``F.linear``)
and pick, per shape, the config with the least summed time over the row counts (a config may depend on N, K and
the dtype, never on M: one config per weight keeps every row's result independent of the row count).
Prints JSON (``bench/results/gemm-sweep-h200.json``); the picks go into ``triton_ops.SHAPE_CONFIGS``.

    python bench/gemm_sweep.py qwen2.5-7b 128,1024,2048
"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from typedlm.bench.models import ARCHS
from typedlm.runner.invariant import triton_ops

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
rows = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [128, 1024, 2048]

CANDIDATES = [dict(BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=s) for bm, bn, bk, w, s in [
    (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4),
    (256, 128, 64, 8, 3), (128, 128, 128, 8, 3), (64, 128, 64, 4, 4), (64, 256, 64, 4, 4), (64, 128, 128, 4, 3),
    (128, 64, 64, 4, 4), (64, 64, 64, 4, 4), (64, 64, 128, 4, 4), (128, 256, 64, 8, 5)]]


def ms(fn, runs: int = 5) -> float:
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def shapes(cfg: dict) -> dict:
    hid, inter, H, kvh = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = hid // H
    return {"q/o": (hid, hid), "k/v": (kvh * d, hid), "gate/up": (inter, hid), "down": (hid, inter),
            "lm_head": (cfg["vocab_size"], hid), "qkv_fused": (hid + 2 * kvh * d, hid), "gate_up_fused": (2 * inter, hid)}


def key(c: dict) -> str:
    return f"{c['BM']}x{c['BN']}x{c['BK']}_w{c['num_warps']}_s{c['num_stages']}"


def main() -> None:
    dev, bf = "cuda", torch.bfloat16
    out = {"arch": arch, "device": torch.cuda.get_device_name(0), "rows": rows, "shapes": {}, "picked": {}}
    default = dict(triton_ops.GEMM)
    for name, (N, K) in shapes(ARCHS[arch]).items():
        w = torch.randn(N, K, device=dev, dtype=bf) * 0.02
        xs = {m: torch.randn(m, K, device=dev, dtype=bf) for m in rows}
        res = {"cublas": {m: ms(lambda m=m: F.linear(xs[m], w)) for m in rows}}
        for c in CANDIDATES:
            triton_ops.GEMM.update(c)
            triton_ops.SHAPE_CONFIGS.clear()  # every candidate on every shape
            try:
                res[key(c)] = {m: ms(lambda m=m: triton_ops.linear(xs[m], w)) for m in rows}
            except Exception as e:  # noqa: BLE001 - a config that does not fit the shared memory
                res[key(c)] = {"error": str(e)[:120]}
        triton_ops.GEMM.update(default)
        total = {k: sum(v.values()) for k, v in res.items() if k != "cublas" and "error" not in v}
        best = min(total, key=total.get)
        out["shapes"][name] = {"N": N, "K": K, "ms": res}
        out["picked"][name] = {"N": N, "K": K, "config": best, "sum_ms": total[best],
                               "default_sum_ms": total.get(key(default)), "cublas_sum_ms": sum(res["cublas"].values())}
        print(json.dumps({name: out["picked"][name]}), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


main()
