"""Decoder-layer math for the static-slot runner (Llama / Qwen2 / Qwen3): the same operations as the
model's own modules, over fused weights and the slot buffers. No weight is copied (:func:`fuse`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fuse(layer) -> tuple:
    """One decoder layer's weights, q/k/v and gate/up each in one matrix. The module parameters are
    turned into views of the fused tensors, so the model's own forward (prefill, decide, HF baselines)
    reads the same memory: nothing is duplicated."""
    a, mlp = layer.self_attn, layer.mlp

    def cat(mods, attr):
        parts = [getattr(m, attr) for m in mods]
        if parts[0] is None:
            return None
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


def decode_layer(h, cos, sin, hidden, rows, pos, kc, vc, n1, qkv_w, qkv_b, qn, kn, o_w, o_b, n2, gu_w, d_w,
                 eps: float, scaling: float, heads: int, kv_heads: int, hd: int, cols: int):
    """One decoder layer for one new token per row ([b, 1, hidden]), the same math as the model's
    modules: RMSNorm, fused q/k/v, (q/k norm), RoPE, K/V written at ``pos`` of each row's slot,
    grouped attention over the first ``cols`` columns, o_proj, RMSNorm, SiLU-gated MLP."""
    b = h.shape[0]
    x = rms(h, n1, eps)
    qkv = F.linear(x, qkv_w, qkv_b)
    q, k, v = qkv.split([heads * hd, kv_heads * hd, kv_heads * hd], dim=-1)
    q, k, v = q.view(b, heads, hd), k.view(b, kv_heads, hd), v.view(b, kv_heads, hd)
    if qn is not None:
        q, k = rms(q, qn, eps), rms(k, kn, eps)
    c, s_ = cos.view(b, 1, hd), sin.view(b, 1, hd)
    q = q * c + rotate_half(q) * s_
    k = k * c + rotate_half(k) * s_
    kc[rows, :, pos] = k
    vc[rows, :, pos] = v
    qg = q.view(b, kv_heads, heads // kv_heads, hd)
    att = torch.matmul(qg, kc[:b, :, :cols].transpose(-1, -2)).float() * scaling
    att = att.masked_fill(hidden, float("-inf")).softmax(-1).to(q.dtype)
    o = torch.matmul(att, vc[:b, :, :cols])  # [b, kv_heads, group, hd]
    h = h + F.linear(o.reshape(b, 1, heads * hd), o_w, o_b)
    x = rms(h, n2, eps)
    gate, up = F.linear(x, gu_w).chunk(2, dim=-1)
    return h + F.linear(F.silu(gate) * up, d_w)
