"""Batch-invariant GEMM and RMSNorm as Triton kernels (CUDA, bf16/fp16; :mod:`.ops` is the torch version).

Invariant by construction, the technique of Thinking Machines' ``batch_invariant_ops`` and vLLM's
batch-invariant mode: one reduction order per weight, so each output element is reduced in the same order
whatever the number of rows. The GEMM computes each ``[BM, BN]`` output tile by one program walking K in fixed
``BK`` steps; a weight shape may split K into a fixed number ``SPLIT`` of ranges (split-K: more programs when
few rows give few tiles), their float32 partial sums then added in order ``((p0 + p1) + p2) ..`` by elementwise
adds. The reduction settings :data:`REDUCTION` (``BK``, ``SPLIT``) depend on the weight shape ``(N, K)`` and the
device only; the tile settings (``BM``, ``BN``, ``GROUP``, warps, stages) may depend on the row count M too
(:func:`config`: :data:`GEMM`, or the table ``bench/scripts/gemm_sweep.py --write`` measured, ``gemm_configs.json``, per
shape a list of row-count buckets: small tiles where few rows would leave most SMs idle). Tiles only cut the output:
on the H200 every row has the same bits under all 21 configs tried (12 tiles: BM 16-256, BN 64-256, 4/8 warps,
3/4 stages, mma.sync and wgmma) at 1-2,048 rows, checked by the sweep before it picks. There ``BK`` 64 vs
128 and cuBLAS gave the same bits too (each
element is one chain of k16 MMAs in K order); ``BK`` stays fixed per shape all the same (the interpreter differs).
RMSNorm reduces one row per program over a fixed-width block.
Unlike :mod:`.ops`' fixed row tiles over cuBLAS, nothing is padded and each weight is read once per pass.
"""

from __future__ import annotations

import bisect
import functools
import json
from pathlib import Path

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None

# any weight shape the table does not name: the best single config of the first H200 sweep (7 shapes x 14 configs,
# M 128 / 1,024 / 2,048; bench/scripts/gemm_sweep.py)
GEMM = {"BM": 128, "BN": 128, "BK": 64, "GROUP": 8, "num_warps": 8, "num_stages": 3, "SPLIT": 1}
REDUCTION = ("BK", "SPLIT")  # what fixes a row's reduction order: per weight shape, never per row count
TABLE = Path(__file__).with_name("gemm_configs.json")
# {device name: {"NxK": {"BK", "SPLIT", "rows": [[most rows or null, {tile settings}], ...]}}}
SHAPE_CONFIGS: dict[tuple[int, int], dict] = {}  # (N, K) -> one config at every row count (the sweep's trials)


def _buckets(entry: dict) -> tuple[tuple[int, ...], tuple[dict, ...]]:
    """A table entry -> (the buckets' row bounds, each bucket's full config); the last bucket takes any M."""
    fixed = {k: entry[k] for k in REDUCTION if k in entry}
    bounds, configs = [], []
    for most, tiles in entry["rows"]:
        if any(k in tiles for k in REDUCTION):
            raise ValueError(f"gemm_configs.json: {sorted(REDUCTION)} may not depend on the row count ({tiles})")
        bounds.append(most)
        configs.append({**GEMM, **tiles, **fixed})
    if bounds[-1:] != [None] or None in bounds[:-1] or bounds[:-1] != sorted(bounds[:-1]):
        raise ValueError(f"gemm_configs.json: row buckets must rise and end with null (any M): {bounds}")
    return tuple(bounds[:-1]), tuple(configs)


def table(name: str) -> dict:
    """The measured configs of device kind ``name`` (``{(N, K): (bounds, configs)}``; none for ``""``, the CPU's)."""
    mine = json.loads(TABLE.read_text()).get(name, {}) if TABLE.exists() else {}
    return {tuple(int(v) for v in k.split("x")): _buckets(c) for k, c in mine.items()}


@functools.lru_cache(maxsize=8)
def _table(device: torch.device) -> dict:
    return table(torch.cuda.get_device_name(device) if device.type == "cuda" else "")


def by_rows(entry: tuple, M: int) -> dict:
    """The config of the bucket of ``M`` rows in a table entry ``(bounds, configs)``."""
    bounds, configs = entry
    return configs[bisect.bisect_left(bounds, M)]


def config(N: int, K: int, M: int, device: torch.device) -> dict:
    """The GEMM config of ``M`` rows times a ``[N, K]`` weight on ``device``: :data:`GEMM`, overridden by the
    measured table's bucket for ``M`` (a bisection: it runs per call, also inside CUDA graph capture)."""
    own = SHAPE_CONFIGS.get((N, K))
    if own is not None:
        return {**GEMM, **own}
    entry = _table(device).get((N, K))
    return GEMM if entry is None else by_rows(entry, M)


def available(x: torch.Tensor) -> bool:
    return triton is not None and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)


if triton is not None:
    @triton.jit(do_not_specialize=["M"])
    def _gemm(A, W, C, M, N, K, K_PER, sam, swn, scm, scs,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, PARTIAL: tl.constexpr):
        pid = tl.program_id(0)
        k0 = tl.program_id(1) * K_PER  # this program's range of K (split-K; the whole of K when not split)
        grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        per_group = GROUP * grid_n  # programs ordered in groups of GROUP row blocks (weight tiles reused in L2)
        first_m = (pid // per_group) * GROUP
        size_m = min(grid_m - first_m, GROUP)
        pm = first_m + (pid % per_group) % size_m
        pn = (pid % per_group) // size_m
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = k0 + tl.arange(0, BK)
        a_ptr = A + rm[:, None].to(tl.int64) * sam + rk[None, :]
        w_ptr = W + rn[None, :].to(tl.int64) * swn + rk[:, None]
        acc = tl.zeros([BM, BN], tl.float32)
        for k in range(0, K_PER, BK):
            live = rk + k < tl.minimum(K, k0 + K_PER)
            a = tl.load(a_ptr, mask=(rm[:, None] < M) & live[None, :], other=0.0)
            w = tl.load(w_ptr, mask=(rn[None, :] < N) & live[:, None], other=0.0)
            acc = tl.dot(a, w, acc)
            a_ptr += BK
            w_ptr += BK
        out = C + tl.program_id(1).to(tl.int64) * scs + rm[:, None].to(tl.int64) * scm + rn[None, :]
        if PARTIAL:
            tl.store(out, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
        else:
            tl.store(out, acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    @triton.jit(do_not_specialize=["M"])
    def _rms(X, Wt, Y, M, D, sx, sy, eps, BD: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BD)
        live = cols < D
        x = tl.load(X + row * sx + cols, mask=live, other=0.0).to(tl.float32)
        var = tl.sum(x * x, 0) / D
        y = (x * tl.rsqrt(var + eps)).to(Y.dtype.element_ty)
        w = tl.load(Wt + cols, mask=live, other=0.0)
        tl.store(Y + row * sy + cols, (w.to(tl.float32) * y.to(tl.float32)).to(Y.dtype.element_ty), mask=live)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` (x ``[..., K]``, weight ``[N, K]``) with a per-row result independent of the row count."""
    lead, K = x.shape[:-1], x.shape[-1]
    a = x.reshape(-1, K)
    if a.stride(-1) != 1:
        a = a.contiguous()
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    M, N = a.shape[0], w.shape[0]
    g = config(N, K, M, x.device)
    split = max(1, min(int(g["SPLIT"]), triton.cdiv(K, g["BK"])))
    k_per = triton.cdiv(triton.cdiv(K, split), g["BK"]) * g["BK"]
    split = triton.cdiv(K, k_per)  # no empty range
    c = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M:
        out = c if split == 1 else torch.empty(split, M, N, dtype=torch.float32, device=x.device)
        grid = (triton.cdiv(M, g["BM"]) * triton.cdiv(N, g["BN"]), split)
        _gemm[grid](a, w, out, M, N, K, k_per, a.stride(0), w.stride(0), N, out.stride(0) if split > 1 else 0,
                    BM=g["BM"], BN=g["BN"], BK=g["BK"], GROUP=g["GROUP"], PARTIAL=split > 1,
                    num_warps=g["num_warps"], num_stages=g["num_stages"])
        if split > 1:  # the partial sums in a fixed order, whatever M
            acc = out[0]
            for s in range(1, split):
                acc = acc + out[s]
            c.copy_(acc)
    y = c.view(*lead, N)
    return y + bias if bias is not None else y


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama/Qwen RMSNorm (float32 inside, normalized in the input dtype, times the weight), one row a program."""
    D = x.shape[-1]
    a = x.reshape(-1, D)
    if a.stride(-1) != 1:
        a = a.contiguous()
    y = torch.empty(a.shape, dtype=x.dtype, device=x.device)
    if a.shape[0]:
        BD = triton.next_power_of_2(D)
        _rms[(a.shape[0],)](a, weight, y, a.shape[0], D, a.stride(0), y.stride(0), eps, BD=BD,
                            num_warps=min(16, max(1, BD // 256)))
    return y.view(x.shape)
