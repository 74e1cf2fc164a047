"""Sweep the batch-invariant Triton GEMM's config per weight shape and row-count bucket (issue 20), after checking
on the device that the tile settings leave every row's bits alone.

A row's result depends on the order each output element's K-reduction runs in: ``BK`` (and ``SPLIT``), and the
MMA instruction's own order; ``BM``/``BN``/``GROUP``/warps/stages only cut the output into tiles. Checked here,
not assumed: for every weight shape a decision's prefill multiplies by (a random-weight architecture's q/o, k/v,
gate/up, down, lm_head and the fused q/k/v and gate/up), random inputs, each candidate tile under each reduction
family (``BK`` with ``SPLIT`` 1) computes rows ``11 .. 11+M`` at M in :data:`CHECKED` and must equal, bit for bit
(``torch.equal``), the family's reference tile (:data:`TILES`' first, the old single config) over all rows; the
compiled instruction (``wgmma`` / ``mma.sync``) of each is recorded, and whether the two families' references
and cuBLAS (``F.linear``) are equal (controls; on the H200 all three are: ``gemm-sweep-h200-4.json``). Only tiles
identical on every shape and row count are eligible.

Then each eligible config is timed (GPU time of a CUDA graph of calls over copies of the weight: no host launch
cost, weights read from memory, not L2) at the row counts of :data:`BUCKETS`; per shape the reduction family with
the least summed cost over the buckets is kept, and each bucket takes that family's fastest tile (cost: time over
the best time at that row count). Prints JSON
(``bench/results/gemm-sweep-h200.json``); ``--write`` stores the picks for this device in
``typedlm/runner/invariant/gemm_configs.json`` (what the GEMM reads: per shape ``BK``, ``SPLIT`` and the buckets).

    python bench/scripts/gemm_sweep.py qwen2.5-7b --write
"""

import json
import sys
import time

import torch
import torch.nn.functional as F

from typedlm.testing.archs import ARCHS
from typedlm.runner.invariant import triton_ops

arch = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b"
DEV, DTYPE = "cuda", torch.bfloat16
CHECKED = (1, 7, 64, 170, 300, 1000, 2048)  # row counts whose bits are compared with the reference's
SPREAD = 256 << 20  # bytes of weight copies a timed graph reads (> 2x the L2)
OFFSET = 11  # the checked rows start here: a row sits elsewhere in its tile than in the reference pass
BUCKETS = {16: (16,), 32: (32,), 64: (64,), 128: (128,), 256: (256,), 320: (320,), 384: (384,), 448: (448,),
           512: (512,), 1024: (1024,), None: (2048,)}  # most rows of a bucket (None: any) -> the row counts timed for it
REDUCTIONS = ({"BK": 64, "SPLIT": 1}, {"BK": 128, "SPLIT": 1})
TILES = [dict(BM=bm, BN=bn, GROUP=8, num_warps=w, num_stages=st) for bm, bn, w, st in (
    (128, 128, 8, 3),  # the reference: the old one-config-for-every-M tiles
    (16, 64, 4, 4), (16, 128, 4, 4), (32, 64, 4, 4), (32, 128, 4, 4), (64, 64, 4, 4), (64, 128, 4, 3),
    (64, 128, 4, 4), (64, 256, 8, 3), (128, 64, 4, 4), (128, 256, 8, 3), (256, 128, 8, 3))]


def shapes(cfg: dict) -> dict:
    hid, inter, H, kvh = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = hid // H
    return {"q/o": (hid, hid), "k/v": (kvh * d, hid), "gate/up": (inter, hid), "down": (hid, inter),
            "lm_head": (cfg["vocab_size"], hid), "qkv_fused": (hid + 2 * kvh * d, hid), "gate_up_fused": (2 * inter, hid)}


def key(c: dict) -> str:
    return f"{c['BM']}x{c['BN']}x{c['BK']}_w{c['num_warps']}_s{c['num_stages']}_k{c['SPLIT']}"


def run(N: int, K: int, c: dict, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    triton_ops.SHAPE_CONFIGS[(N, K)] = c
    try:
        return triton_ops.linear(x, w)
    finally:
        triton_ops.SHAPE_CONFIGS.pop((N, K))


def kernels() -> list:
    try:  # Triton's per-device kernel caches (their layout is Triton's own: best effort)
        return [k for cache in triton_ops._gemm.device_caches.values() for k in cache[0].values()]
    except Exception:  # noqa: BLE001
        return []


def instruction(before: int) -> str:
    ptx = " ".join(getattr(k, "asm", {}).get("ptx", "") for k in kernels()[before:])
    return "wgmma" if "wgmma" in ptx else "mma.sync" if "mma.sync" in ptx else "unknown"


def check(label: str, N: int, K: int, configs: list, out: dict) -> None:
    """Each config's rows vs its family's reference (bits), recorded in ``out``."""
    gen = torch.Generator(device=DEV).manual_seed(N + K)
    w = torch.randn(N, K, device=DEV, dtype=DTYPE, generator=gen) * 0.02
    x = torch.randn(OFFSET + max(CHECKED), K, device=DEV, dtype=DTYPE, generator=gen)
    refs = {}
    for red in REDUCTIONS:
        refs[red["BK"]] = run(N, K, {**TILES[0], **red}, x, w)
    out["controls"][label] = {"references_equal": torch.equal(*refs.values()),
                              "cublas_equals_reference": torch.equal(F.linear(x, w), refs[REDUCTIONS[0]["BK"]])}
    for c in configs:
        k = key(c)
        if out["errors"].get(k):
            continue
        before = len(kernels())
        try:
            got = {m: run(N, K, c, x[OFFSET:OFFSET + m], w) for m in CHECKED}
        except Exception as e:  # noqa: BLE001 - a tile that does not fit the shared memory
            out["errors"][k] = str(e)[:120]
            continue
        out["instruction"].setdefault(k, instruction(before))
        ref = refs[c["BK"]]
        for m, y in got.items():
            want = ref[OFFSET:OFFSET + m]
            if not torch.equal(y, want):
                out["identical"][k] = False
                bad = (y != want).any(-1)
                out["mismatches"].append({"shape": label, "config": k, "rows": m, "rows_differ": int(bad.sum()),
                                          "max_abs": float((y.float() - want.float()).abs().max())})
        out["identical"].setdefault(k, True)


def gpu_ms(fn, reps: int = 5) -> float:
    """GPU milliseconds of ``fn`` replayed as a CUDA graph (no host launch cost: as in the score graphs)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def timings(N: int, K: int, configs: list) -> dict:
    """ms per call at each timed row count: a graph of calls over copies of the weight (>= 256 MB in all, so
    each call reads its weight from memory, not the 50 MB L2, as a model's layers do)."""
    copies = max(1, -(-SPREAD // (N * K * 2)))
    ws = [torch.randn(N, K, device=DEV, dtype=DTYPE) * 0.02 for _ in range(copies)]
    ms = {"cublas": {}}
    for m in sorted({m for ms_ in BUCKETS.values() for m in ms_}):
        x = torch.randn(m, K, device=DEV, dtype=DTYPE)
        ms["cublas"][m] = gpu_ms(lambda: [F.linear(x, w) for w in ws]) / copies
        for c in configs:
            triton_ops.SHAPE_CONFIGS[(N, K)] = c
            ms.setdefault(key(c), {})[m] = gpu_ms(lambda: [triton_ops.linear(x, w) for w in ws]) / copies
        triton_ops.SHAPE_CONFIGS.pop((N, K))
    return ms


def pick(ms: dict, configs: list) -> dict:
    """The table entry: the reduction family with the least summed cost, each bucket's fastest tile in it."""
    rows = list(ms["cublas"])
    best = {m: min(ms[key(c)][m] for c in configs) for m in rows}
    cost = {key(c): {m: ms[key(c)][m] / best[m] for m in rows} for c in configs}
    fams = {}
    for red in REDUCTIONS:
        mine = [c for c in configs if c["BK"] == red["BK"] and c["SPLIT"] == red["SPLIT"]]
        if not mine:
            continue
        tiles = [min(mine, key=lambda c: sum(cost[key(c)][m] for m in timed)) for timed in BUCKETS.values()]
        total = sum(sum(cost[key(t)][m] for m in timed) / len(timed) for t, timed in zip(tiles, BUCKETS.values()))
        fams[total] = (red, tiles)
    red, tiles = fams[min(fams)]
    buckets = []
    for most, t in zip(BUCKETS, tiles):
        tile = {k: t[k] for k in ("BM", "BN", "GROUP", "num_warps", "num_stages")}
        if buckets and buckets[-1][1] == tile:
            buckets.pop()  # the same tile as the bucket below: one bucket
        buckets.append([most, tile])
    return {**red, "rows": buckets, "keys": [key(t) for t in tiles]}


def main() -> None:
    t0 = time.time()
    name = torch.cuda.get_device_name(0) if DEV == "cuda" else DEV
    out = {"arch": arch, "device": name, "command": " ".join(["python", *sys.argv]), "checked_rows": CHECKED,
           "offset": OFFSET, "buckets": {str(k): v for k, v in BUCKETS.items()}, "instruction": {}, "identical": {},
           "errors": {}, "mismatches": [], "controls": {}, "ms": {}, "picked": {}}
    configs = [{**t, **red} for red in REDUCTIONS for t in TILES]
    todo = shapes(ARCHS[arch])
    for label, (N, K) in todo.items():
        check(label, N, K, configs, out)
        print(json.dumps({label: "checked", "s": round(time.time() - t0)}), file=sys.stderr, flush=True)
    same = [c for c in configs if out["identical"].get(key(c))]
    out["family"] = [key(c) for c in same]
    for label, (N, K) in todo.items():
        ms = timings(N, K, same)
        out["ms"][label] = {"N": N, "K": K, **ms}
        out["picked"][label] = {"N": N, "K": K, **pick(ms, same)}
        print(json.dumps({label: out["picked"][label]["keys"], "s": round(time.time() - t0)}), file=sys.stderr,
              flush=True)
    out["seconds"] = time.time() - t0
    print(json.dumps(out, indent=1))
    if "--write" in sys.argv:
        table = json.loads(triton_ops.TABLE.read_text()) if triton_ops.TABLE.exists() else {}
        table[name] = {**table.get(name, {}), **{f"{p['N']}x{p['K']}": {k: p[k] for k in ("BK", "SPLIT", "rows")}
                                                 for p in out["picked"].values()}}
        triton_ops.TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
