"""Decoder-layer math for the static-slot runner (Llama / Qwen2 / Qwen3): the same operations as the
model's own modules, over fused weights and the slot buffers. No weight is copied (:func:`fuse`)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .invariant import mode as invariant


def joined(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """The one tensor ``parts`` are consecutive row blocks of (contiguous, back to back in one storage: an earlier
    :func:`fuse`), as a view; else None."""
    first = parts[0].data
    at = first.data_ptr()
    for p in parts:
        if not p.is_contiguous() or p.data_ptr() != at or p.untyped_storage().data_ptr() != \
                first.untyped_storage().data_ptr() or p.shape[1:] != first.shape[1:]:
            return None
        at += p.numel() * p.element_size()
    return first.as_strided((sum(p.shape[0] for p in parts), *first.shape[1:]), first.stride())


def fuse(layer) -> tuple:
    """One decoder layer's weights, q/k/v and gate/up each in one matrix. The module parameters are
    turned into views of the fused tensors, so the model's own forward (prefill, decide, HF baselines)
    reads the same memory: nothing is duplicated. Idempotent: a layer fused before gives views of the same
    tensors (no copy, no parameter moved: the prefix cache's weights stamp stays)."""
    a, mlp = layer.self_attn, layer.mlp

    def cat(mods, attr):
        parts = [getattr(m, attr) for m in mods]
        if parts[0] is None:
            return None
        done = joined(parts)
        if done is not None:
            return done
        fused = torch.cat([p.data for p in parts], dim=0)
        at = 0
        for m, p in zip(mods, parts):
            n = p.shape[0]
            getattr(m, attr).data = fused[at: at + n]
            at += n
        return fused

    qkv = cat([a.q_proj, a.k_proj, a.v_proj], "weight")
    qkv_b = cat([a.q_proj, a.k_proj, a.v_proj], "bias")
    gate_up = cat([mlp.gate_proj, mlp.up_proj], "weight")
    qn = a.q_norm.weight if hasattr(a, "q_norm") else None
    kn = a.k_norm.weight if hasattr(a, "k_norm") else None
    return (layer.input_layernorm.weight, qkv, qkv_b, qn, kn, a.o_proj.weight, a.o_proj.bias,
            layer.post_attention_layernorm.weight, gate_up, mlp.down_proj.weight)


def rms(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def project_qkv(attn, x, cos, sin, head_dim: int, qk_norm: bool):
    """The attention module's own q/k/v projections (+ q/k norm) and RoPE for ``x`` ``[b, t, hidden]``
    -> q ``[b, heads, t, d]``, k and v ``[b, kv_heads, t, d]`` (the eager path)."""
    b, t, _ = x.shape
    q = attn.q_proj(x).view(b, t, -1, head_dim)
    k = attn.k_proj(x).view(b, t, -1, head_dim)
    v = attn.v_proj(x).view(b, t, -1, head_dim).transpose(1, 2)
    if qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


def attend(q, k, v, visible, scaling: float) -> torch.Tensor:
    """Grouped attention, q ``[n, heads, t, d]`` over k/v ``[n, kv_heads, w, d]`` (``visible`` bool
    ``[n, 1, t, w]``, or None: causal over the query's own keys) -> ``[n, t, heads, d]``; the batch-invariant
    kernel when it is on for this thread (deterministic generation)."""
    if invariant.active():
        return invariant.attention(q, k, v, visible, scaling)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, is_causal=visible is None, scale=scaling,
                                       enable_gqa=True)
    return o.transpose(1, 2)


def _dense_attention(q, kc, vc, visible, scaling: float):
    """One query per row: q ``[b, kv_heads, group, hd]`` over ``kc``/``vc`` ``[b, kv_heads, cols, hd]`` (``visible``
    ``[b, 1, 1, cols]``): two batched matmuls and a softmax that ``torch.compile`` fuses with the mask (faster
    than one SDPA kernel for a single query on CUDA: ``bench/scripts/decode_attention_ab.py``)."""
    att = torch.matmul(q, kc.transpose(-1, -2)).float() * scaling
    att = att.masked_fill(~visible, float("-inf")).softmax(-1).to(q.dtype)
    return torch.matmul(att, vc)


def _invariant_attention(q, kc, vc, visible, scaling: float):
    b, kvh, g, hd = q.shape
    o = invariant.attention(q.reshape(b, kvh * g, 1, hd), kc, vc, visible, scaling)  # [b, 1, heads, hd]
    return o.view(b, kvh, g, hd)


def qkv_rope(h, n1, qkv_w, qkv_b, qn, kn, cos, sin, eps: float, heads: int, kv_heads: int, hd: int, *,
             linear=F.linear, norm=rms):
    """A layer's first half for ``n`` new tokens (``h`` ``[b, 1, hidden]`` one a row, or ``[1, t, hidden]`` one
    row's): RMSNorm, fused q/k/v, (q/k norm), RoPE -> q ``[n, heads, hd]``, k and v ``[n, kv_heads, hd]``."""
    n = h.shape[0] * h.shape[1]
    qkv = linear(norm(h, n1, eps), qkv_w, qkv_b).reshape(n, -1)
    q, k, v = qkv.split([heads * hd, kv_heads * hd, kv_heads * hd], dim=-1)
    q, k, v = q.view(n, heads, hd), k.view(n, kv_heads, hd), v.view(n, kv_heads, hd)
    if qn is not None:
        q, k = norm(q, qn, eps), norm(k, kn, eps)
    c, s_ = cos.view(n, 1, hd), sin.view(n, 1, hd)
    return q * c + rotate_half(q) * s_, k * c + rotate_half(k) * s_, v


def out_mlp(h, o, o_w, o_b, n2, gu_w, d_w, eps: float, *, linear=F.linear, norm=rms):
    """A layer's second half: ``h`` plus the attention output ``o`` (``h``'s shape) through o_proj, then the
    RMSNorm'd SiLU-gated MLP's residual."""
    h = h + linear(o, o_w, o_b)
    gate, up = linear(norm(h, n2, eps), gu_w).chunk(2, dim=-1)
    return h + linear(F.silu(gate) * up, d_w)


def decode_layer(h, cos, sin, visible, rows, pos, kc, vc, n1, qkv_w, qkv_b, qn, kn, o_w, o_b, n2, gu_w, d_w,
                 eps: float, scaling: float, heads: int, kv_heads: int, hd: int, *,
                 linear=F.linear, norm=rms, attention=_dense_attention):
    """One decoder layer for one new token per row ([b, 1, hidden]), the same math as the model's
    modules: RMSNorm, fused q/k/v, (q/k norm), RoPE, K/V written at ``pos`` of each row's slot,
    grouped attention over the first ``cols`` columns (``visible`` ``[b, 1, 1, cols]``), o_proj, RMSNorm,
    SiLU-gated MLP. The ops are torch's (fast, fused by ``torch.compile``) or, in :data:`invariant_decode_layer`,
    the batch-invariant ones."""
    b, cols = h.shape[0], visible.shape[-1]
    q, k, v = qkv_rope(h, n1, qkv_w, qkv_b, qn, kn, cos, sin, eps, heads, kv_heads, hd, linear=linear, norm=norm)
    kc[rows, :, pos] = k
    vc[rows, :, pos] = v
    qg = q.view(b, kv_heads, heads // kv_heads, hd)
    o = attention(qg, kc[:b, :, :cols], vc[:b, :, :cols], visible, scaling)  # [b, kv_heads, group, hd]
    return out_mlp(h, o.reshape(b, 1, heads * hd), o_w, o_b, n2, gu_w, d_w, eps, linear=linear, norm=norm)


# what a decode bucket changes (compiled.compiled_layer): the rows of h, cos, sin, visible, rows, pos; visible's columns
DECODE_DIMS = {0: (0,), 1: (0,), 2: (0,), 3: (0, 3), 4: (0,), 5: (0,)}

# deterministic generation: a row's bits do not depend on the other rows, the bucket or stale slot columns
invariant_decode_layer = functools.partial(decode_layer, linear=invariant.linear, norm=invariant.rms_norm,
                                           attention=_invariant_attention)
