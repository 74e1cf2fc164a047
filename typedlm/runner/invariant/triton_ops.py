"""Batch-invariant GEMM and RMSNorm as Triton kernels (CUDA, bf16/fp16; :mod:`.ops` is the torch version).

Invariant by construction, the technique of Thinking Machines' ``batch_invariant_ops`` and vLLM's
batch-invariant mode: one compiled kernel for every batch size, no split of the reduction, so each output
element is reduced in the same order whatever the number of rows. The GEMM computes each ``[BM, BN]``
output tile by one program walking K in fixed ``BK`` steps (one config for all shapes: :data:`GEMM`); the
row count only changes how many programs run. RMSNorm reduces one row per program over a fixed-width block.
Unlike :mod:`.ops`' fixed row tiles over cuBLAS, nothing is padded and each weight is read once per pass.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None

# the config of any weight shape: the best over 7 shapes x 14 configs x M 128/1,024/2,048 (H200, bf16; was
# stages 4: 8-22 % slower per shape, bench/results/gemm-sweep-h200.json)
GEMM = {"BM": 128, "BN": 128, "BK": 64, "GROUP": 8, "num_warps": 8, "num_stages": 3}
# per weight shape (N, K) where another config won (``bench/gemm_sweep.py``: the least time summed over the row
# counts; never chosen per row count M: one config per weight keeps every row's result independent of how many
# rows share the pass): Qwen2.5-7B's down_proj and fused q/k/v
SHAPE_CONFIGS: dict[tuple[int, int], dict] = {(3584, 18944): {"BK": 128}, (4608, 3584): {"BK": 128}}


def available(x: torch.Tensor) -> bool:
    return triton is not None and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)


if triton is not None:
    @triton.jit(do_not_specialize=["M"])
    def _gemm(A, W, C, M, N, K, sam, swn, scm,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        per_group = GROUP * grid_n  # programs ordered in groups of GROUP row blocks (weight tiles reused in L2)
        first_m = (pid // per_group) * GROUP
        size_m = min(grid_m - first_m, GROUP)
        pm = first_m + (pid % per_group) % size_m
        pn = (pid % per_group) // size_m
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptr = A + rm[:, None].to(tl.int64) * sam + rk[None, :]
        w_ptr = W + rn[None, :].to(tl.int64) * swn + rk[:, None]
        acc = tl.zeros([BM, BN], tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr, mask=(rm[:, None] < M) & (rk[None, :] + k < K), other=0.0)
            w = tl.load(w_ptr, mask=(rn[None, :] < N) & (rk[:, None] + k < K), other=0.0)
            acc = tl.dot(a, w, acc)
            a_ptr += BK
            w_ptr += BK
        tl.store(C + rm[:, None].to(tl.int64) * scm + rn[None, :], acc.to(C.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

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
    c = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M:
        g = {**GEMM, **SHAPE_CONFIGS.get((N, K), {})}
        grid = (triton.cdiv(M, g["BM"]) * triton.cdiv(N, g["BN"]),)
        _gemm[grid](a, w, c, M, N, K, a.stride(0), w.stride(0), c.stride(0), BM=g["BM"], BN=g["BN"], BK=g["BK"],
                    GROUP=g["GROUP"], num_warps=g["num_warps"], num_stages=g["num_stages"])
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
