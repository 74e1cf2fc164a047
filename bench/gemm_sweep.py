"""Sweep the batch-invariant Triton GEMM's config per weight shape (issue 20): for every ``(N, K)`` a decision's
prefill multiplies by (a random-weight architecture's q/k/v/o, gate/up/down, lm_head, and the fused q/k/v and
gate/up of the static decode), time each candidate config (tiles, stages, a fixed split of K) at several row
counts against cuBLAS (``F.linear``) and pick, per shape, the config with the least sum over the row counts of
its time over the best time at that count (each row count weighs the same: a decision's ~300-row pass as much
as a 2,000-token prefill). A config may depend on N, K and the device, never on M: one config per weight keeps
every row's result independent of the row count. Prints JSON (``bench/results/gemm-sweep-h200.json``);
``--write`` stores the picks for this device in ``typedlm/runner/invariant/gemm_configs.json`` (what the GEMM
reads).

    python bench/gemm_sweep.py qwen2.5-7b 128,384,1024,2048 --write
"""

import json
import sys

import torch
import torch.nn.functional as F

from typedlm.bench.models import ARCHS
from typedlm.bench.timing import cuda_ms
from typedlm.runner.invariant import triton_ops

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
rows = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 and sys.argv[2][0].isdigit() else [128, 384, 1024, 2048]

BASES = [(128, 128, 64, 8, 3), (128, 128, 128, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 128, 4, 4),
         (128, 256, 64, 8, 3)]
CANDIDATES = [dict(BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=st, SPLIT=sp)
              for i, (bm, bn, bk, w, st) in enumerate(BASES) for sp in ((1, 2, 4, 8) if i < 3 else (1,))]


def shapes(cfg: dict) -> dict:
    hid, inter, H, kvh = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = hid // H
    return {"q/o": (hid, hid), "k/v": (kvh * d, hid), "gate/up": (inter, hid), "down": (hid, inter),
            "lm_head": (cfg["vocab_size"], hid), "qkv_fused": (hid + 2 * kvh * d, hid), "gate_up_fused": (2 * inter, hid)}


def key(c: dict) -> str:
    return f"{c['BM']}x{c['BN']}x{c['BK']}_w{c['num_warps']}_s{c['num_stages']}_k{c['SPLIT']}"


def main() -> None:
    dev, bf = "cuda", torch.bfloat16
    name = torch.cuda.get_device_name(0)
    out = {"arch": arch, "device": name, "rows": rows, "command": " ".join(["python", *sys.argv]), "shapes": {},
           "picked": {}}
    for label, (N, K) in shapes(ARCHS[arch]).items():
        w = torch.randn(N, K, device=dev, dtype=bf) * 0.02
        xs = {m: torch.randn(m, K, device=dev, dtype=bf) for m in rows}
        res = {"cublas": {m: cuda_ms(lambda m=m: F.linear(xs[m], w), 5) for m in rows}}
        for c in CANDIDATES:
            triton_ops.SHAPE_CONFIGS[(N, K)] = c
            try:
                res[key(c)] = {m: cuda_ms(lambda m=m: triton_ops.linear(xs[m], w), 5) for m in rows}
            except Exception as e:  # noqa: BLE001 - a config that does not fit the shared memory
                res[key(c)] = {"error": str(e)[:120]}
        triton_ops.SHAPE_CONFIGS.pop((N, K))
        ok = {k: v for k, v in res.items() if k != "cublas" and "error" not in v}
        best = {m: min(v[m] for v in ok.values()) for m in rows}
        score = {k: sum(v[m] / best[m] for m in rows) for k, v in ok.items()}
        pick = min(score, key=score.get)
        default = key(triton_ops.GEMM)
        out["shapes"][label] = {"N": N, "K": K, "ms": res}
        out["picked"][label] = {"N": N, "K": K, "config": pick, "ms": ok[pick], "default_ms": ok.get(default),
                                "cublas_ms": res["cublas"],
                                "settings": next(c for c in CANDIDATES if key(c) == pick)}
        print(json.dumps({label: out["picked"][label]["config"]}), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    if "--write" in sys.argv:
        table = json.loads(triton_ops.TABLE.read_text()) if triton_ops.TABLE.exists() else {}
        table[name] = {**table.get(name, {}), **{f"{p['N']}x{p['K']}": p["settings"] for p in out["picked"].values()}}
        triton_ops.TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


main()
