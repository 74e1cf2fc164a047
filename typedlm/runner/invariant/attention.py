"""Batch-invariant attention: a query's output depends only on the ordered list of keys it may see.

A batched decision pass puts many rows (and contexts) side by side under a mask, so a row's visible keys
sit at other positions, among other rows' masked keys, than in its one-row pass; a kernel that reduces over
absolute key blocks (SDPA, FlashAttention, FlexAttention) then groups the same terms differently. Here each
query's allowed keys are first *compacted* in order (key ``i`` of the list is the ``i``-th allowed key),
then reduced in fixed blocks (:data:`KEY_BLOCK` per device) with an online softmax, one block after another (float32).
Blocks past a query's own list are all-masked and change nothing, bit for bit: ``max(m, -inf) = m``,
``exp(0) = 1``, ``+ 0``. So the result is the same whatever the pass holds, and also wherever the split
between cached and fed keys falls (``decide_many``'s shared prefix vs a context's own prefill).
"""

from __future__ import annotations

import torch

from .ops import tile_rows

KEY_BLOCK = {"cuda": 64, "cpu": 256}  # keys per block: fewer, larger blocks cost fewer host-side ops on the CPU


def key_block(device) -> int:
    return KEY_BLOCK.get(torch.device(device).type, KEY_BLOCK["cpu"])


def allowed(mask: torch.Tensor | None, b: int, q: int, k: int, device) -> torch.Tensor:
    """Any mask the model hands attention -> bool ``[b, q, k]`` (True: may attend). None: causal, queries
    the last ``q`` of ``k`` keys; bool masks as they are; additive float masks: 0 allowed, very negative not."""
    if mask is None:
        i = torch.arange(q, device=device)[:, None] + (k - q)
        return (torch.arange(k, device=device)[None, :] <= i).expand(b, q, k)
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    return mask[:, 0, :, -k:].expand(b, q, k)


def compact(allow: torch.Tensor):
    """``[b, q, k]`` bool -> (index ``[b, q, W]`` of each query's allowed keys in order, then filler;
    ``n`` ``[b, q]`` how many; ``lead`` ``[b, q]`` how many leading keys it sees with no gap), ``W`` a
    multiple of the key block."""
    n = allow.sum(-1)
    B = key_block(allow.device)
    W = -(-int(n.max()) // B) * B
    lead = allow.to(torch.int32).cumprod(-1).sum(-1)
    order = torch.argsort((~allow).to(torch.int8), dim=-1, stable=True)
    if W > order.shape[-1]:
        order = torch.cat([order, order[..., :1].expand(*order.shape[:-1], W - order.shape[-1])], -1)
    return order[..., :W], n, lead


def _tiled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a [..., M, x] @ b [..., x, y]`` as a batch of fixed ``[tile, x] @ [x, y]`` products (the per-row
    problem never depends on M). Gathered rows go through it too, one query's ``g`` rows padded to a tile: a
    BLAS may round a ``[g, x]`` product differently from the same rows inside a ``[tile, x]`` one (on AMD EPYC
    it does; Intel's MKL did not), and a row's bits do not depend on its place in a tile nor on the batch."""
    M, T = a.shape[-2], tile_rows(a.device)
    pad = (-M) % T
    if pad:
        a = torch.cat([a, a.new_zeros(*a.shape[:-2], pad, a.shape[-1])], -2)
    out = torch.matmul(a.view(*a.shape[:-2], (M + pad) // T, T, a.shape[-1]), b.unsqueeze(-3))
    return out.view(*a.shape[:-2], M + pad, b.shape[-1])[..., :M, :]


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
              scaling: float) -> torch.Tensor:
    """query ``[b, H, q, d]``, key/value ``[b, kvh, k, d]`` (grouped heads: head ``h`` reads kv head
    ``h // (H // kvh)``) -> output ``[b, q, H, d]`` in the query's dtype.

    Per block of the compacted lists, a query that sees keys ``j .. j+B-1`` whole (a prompt prefix, the
    causal past) reads them in place, one product for all queries on fixed row tiles; the others (the
    causal diagonal, row trees, other contexts' tokens between) get their keys gathered. Both are the same
    per-row products (``[g, d] @ [d, B]``), so a block gives the same bits on either path."""
    b, H, q, d = query.shape
    kvh, k = key.shape[1], key.shape[2]
    g = H // kvh
    order, n, lead = compact(allowed(mask, b, q, k, query.device))
    qf = query.float().reshape(b, kvh, g, q, d).transpose(2, 3).contiguous()  # [b, kvh, q, g, d]
    q_rows = qf.view(b, kvh, q * g, d)
    keys, vals = key.transpose(1, 2), value.transpose(1, 2)  # [b, k, kvh, d]
    m = qf.new_full((b, kvh, q, g, 1), float("-inf"))
    lsum = qf.new_zeros((b, kvh, q, g, 1))
    acc = qf.new_zeros((b, kvh, q, g, d))
    B = key_block(query.device)
    for j in range(0, order.shape[-1], B):
        whole = (lead >= j + B)[:, None, :, None, None]  # [b, 1, q, 1, 1]
        kb, vb = key[:, :, j:j + B].float(), value[:, :, j:j + B].float()
        if kb.shape[2] < B:  # past the last key: only gathered rows have entries here
            kb = torch.cat([kb, kb.new_zeros(b, kvh, B - kb.shape[2], d)], 2)
            vb = torch.cat([vb, vb.new_zeros(b, kvh, B - vb.shape[2], d)], 2)
        s = _tiled(q_rows, kb.transpose(-1, -2)).view(b, kvh, q, g, B) * scaling
        s = s.masked_fill(~whole, float("-inf"))
        bg, qg = ((lead < j + B) & (n > j)).nonzero(as_tuple=True)  # rows whose block j is gathered
        if len(bg):
            idx = order[bg, qg, j:j + B]  # [r, B]
            ok = torch.arange(j, j + B, device=query.device) < n[bg, qg][:, None]
            kg = keys[bg[:, None], idx].float().permute(0, 2, 3, 1)  # [r, kvh, d, B]
            sg = _tiled(qf[bg, :, qg], kg) * scaling  # [r, kvh, g, B]: a padded tile too (see _tiled)
            s[bg, :, qg] = sg.masked_fill(~ok[:, None, None, :], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        base = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - base)
        alpha = torch.exp(m - base)
        lsum = lsum * alpha + p.sum(-1, keepdim=True)
        pv = _tiled(p.view(b, kvh, q * g, B), vb).view(b, kvh, q, g, d)
        if len(bg):
            vg = vals[bg[:, None], idx].float().permute(0, 2, 1, 3)  # [r, kvh, B, d]
            pv[bg, :, qg] = _tiled(p[bg, :, qg], vg)
        acc = acc * alpha + pv
        m = m_new
    out = acc / lsum.clamp_min(torch.finfo(torch.float32).tiny)  # [b, kvh, q, g, d]
    return out.permute(0, 2, 1, 3, 4).reshape(b, q, H, d).to(query.dtype)
