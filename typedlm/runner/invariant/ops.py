"""Batch-invariant building blocks: each row's result is computed by the same kernel call with the same
shapes whatever else shares the pass, so it does not depend on how many rows there are or where a row sits.

The technique (vLLM's batch-invariant mode, Thinking Machines' ``batch_invariant_ops``): a reduction's
order must not depend on the batch shape. GEMM libraries pick a kernel (and split-K, tile sizes) from the
problem shape, so the same row times the same weight gives different bits at M=1 and M=300 (measured on
this CPU's oneDNN/MKL: 6.9e-5 apart at K=576). Here every product runs on row tiles of one fixed height
(:func:`tile_rows`; the last tile zero-padded): one call shape per weight, so one kernel and one reduction
order per row, wherever the row sits in its tile. Row sums (RMSNorm's mean, log-softmax's normalizer) are
the same fixed-tile product with a ones vector.
"""

from __future__ import annotations

import torch

# rows per GEMM call: CUDA big enough that a tile is compute-bound (each tile reads the weight once);
# the CPU small, since its GEMMs are compute-bound at any height
TILE_ROWS = {"cuda": 256, "cpu": 64}


def tile_rows(device: torch.device) -> int:
    return TILE_ROWS.get(device.type, TILE_ROWS["cpu"])


def matmul_rows(x: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
    """``x [..., K] @ w_t [K, N]`` with every GEMM call on a ``[tile, K]`` block of rows."""
    lead, K = x.shape[:-1], x.shape[-1]
    rows = x.reshape(-1, K)
    M, T = rows.shape[0], tile_rows(x.device)
    pad = (-M) % T
    if pad:
        rows = torch.cat([rows, rows.new_zeros(pad, K)])
    out = torch.cat([torch.mm(rows[i:i + T], w_t) for i in range(0, M + pad, T)])
    return out[:M].reshape(*lead, w_t.shape[-1])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` on fixed row tiles."""
    y = matmul_rows(x, weight.t())
    return y + bias if bias is not None else y


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension (float32), keepdim, on fixed row tiles."""
    xf = x.float()
    return matmul_rows(xf, xf.new_ones(xf.shape[-1], 1))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama/Qwen RMSNorm (float32 inside, the input dtype out, times the weight)."""
    xf = x.float()
    var = row_sum(xf * xf) / xf.shape[-1]
    return weight * (xf * torch.rsqrt(var + eps)).to(x.dtype)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """float32 log-softmax over the last dimension: the max is exact in any order, the sum of exponentials
    a fixed-tile row sum."""
    xf = x.float()
    m = xf.amax(-1, keepdim=True)
    z = xf - m
    return z - torch.log(row_sum(torch.exp(z)))
