"""RoPE of a pass's queries and keys as one Triton kernel (CUDA; the graphed decision pass, runner/score_graph.py).

The eager code (transformers' ``apply_rotary_pos_emb``, :func:`.layers.qkv_rope`) runs ``x * cos + rotate_half(x) *
sin`` as five kernels per tensor (mul, neg, cat, mul, add), ten a layer: ~0.8 ms of a later decision's 16 ms on the
H200 at 384 rows (``bench/decide_profile.py``). Here one program per token does both tensors, **the same bits** as
those ops by construction: torch computes each half-precision op in float32 and rounds the result to the tensor's
dtype (round to nearest even); the kernel does the same three ops in the same order with the same roundings —
``a = rne(x * cos)``, ``b = rne(rotate_half(x) * sin)`` (the negation and the product of two 8- or 11-bit
mantissas are exact in float32), ``rne(a + b)`` — and nothing is contracted into an FMA (each product is rounded to
the half dtype before the add). float32 tensors: the same ops without the roundings (tests run it under Triton's
interpreter). ``TYPEDLM_TRITON_ROPE=0`` keeps the torch ops.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None


def available(device: torch.device, head_dim: int) -> bool:
    """The kernel runs here: CUDA, a power-of-two head size, not turned off (tests call :func:`rope` on the CPU under
    Triton's interpreter)."""
    return (triton is not None and device.type == "cuda" and os.environ.get("TYPEDLM_TRITON_ROPE", "1") != "0"
            and head_dim >= 16 and head_dim & (head_dim - 1) == 0)


if triton is not None:
    @triton.jit
    def _rope(X, C, S, O, sxt, sxh, sct, H: tl.constexpr, HP: tl.constexpr, D: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        d = tl.arange(0, D)
        h = tl.arange(0, HP)
        live = (h < H)[:, None]
        half = D // 2
        c = tl.load(C + t * sct + d).to(tl.float32)
        s = tl.load(S + t * sct + d).to(tl.float32)
        base = X + t * sxt + h[:, None].to(tl.int64) * sxh
        x = tl.load(base + d[None, :], mask=live, other=0.0)
        r = tl.load(base + ((d + half) % D)[None, :], mask=live, other=0.0).to(tl.float32)
        r = tl.where((d < half)[None, :], -r, r)  # rotate_half: (-x2, x1)
        a = (x.to(tl.float32) * c[None, :]).to(x.dtype)
        b = (r * s[None, :]).to(x.dtype)
        y = (a.to(tl.float32) + b.to(tl.float32)).to(O.dtype.element_ty)
        tl.store(O + t * (H * D) + h[:, None] * D + d[None, :], y, mask=live)


def _one(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    n, H, D = x.shape
    out = torch.empty(n, H, D, dtype=x.dtype, device=x.device)
    if n:
        _rope[(n,)](x, cos, sin, out, x.stride(0), x.stride(1), cos.stride(0), H=H, HP=triton.next_power_of_2(H), D=D,
                    num_warps=4)
    return out


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q ``[n, heads, d]``, k ``[n, kv_heads, d]`` (any strides with the last one 1), cos/sin ``[n, d]`` (contiguous
    rows) -> ``q * cos + rotate_half(q) * sin`` and the same for k, contiguous, bit for bit the torch ops' result."""
    cos, sin = cos.contiguous(), sin.contiguous()
    return _one(q, cos, sin), _one(k, cos, sin)
