"""Batch-invariant attention as one fused Triton kernel (CUDA; the CPU keeps :mod:`.attention`'s torch loop).

Invariant by construction: one program per (query, kv head, batch row) holds that query's ``g`` grouped
heads as the M side of ``tl.dot`` (padded to 16) and walks the query's *compacted* key list (the keys it may
see, in order) in fixed blocks of :data:`BLOCK_N` list entries from its start, with an online softmax in
float32. Every operand a program reads — its query, the keys and values of list entries ``j .. j+BLOCK_N-1``
(zero past the list's end, where the scores are ``-inf``), the list's length — depends only on that query's
own visible keys, never on what else shares the pass or where its keys sit; every program runs the same
instructions on same-shaped tiles. So a query's output has the same bits in a one-row pass, a batched decide
pass or a packed ``decide_many`` pass, and wherever the split between cached and fed keys falls.

A causal pass with no mask (a prompt prefill) reads contiguous keys ``0 .. k-q+i`` (no index list), in query tiles
(:data:`TILE_ROWS` rows of (query, head) a program, sharing each key block's loads; each row still walks its own keys
in the same blocks from key 0, and row sums go through the MMA like the values, whose bits do not follow the tile's
row count on the H200: ``bench/scripts/gemm_sweep.py``): a query has the same bits as with the causal mask given explicitly
or alone (``bench/scripts/attention_tiles.py`` checks the bits and times it on CUDA). Any mask is compacted on the device (:func:`compact`: a cumulative count and a sorted search,
no host sync), once per mask object and reused by every layer of the forward. Each program reads only its own list, so
masked-out keys (other contexts of a ``decide_many`` pass) cost nothing.
"""

from __future__ import annotations

import threading

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - the CPU install may lack triton; CUDA torch ships it
    triton = None

BLOCK_N = 64  # list entries per block
TILE_ROWS = 128  # rows (query, head) of a causal pass's program (0: one query a program, as with a mask)
_last = threading.local()  # the last mask compacted on this thread: (mask, k, result)


def available(query: torch.Tensor) -> bool:
    """The kernel takes this query: CUDA with triton (any head size: padded to a power of two). Tests run it on
    the CPU under ``TRITON_INTERPRET=1`` by calling :func:`attention` directly."""
    return triton is not None and query.device.type == "cuda"


def compact(mask: torch.Tensor, q: int, k: int):
    """A mask ``[b|1, 1, q, >=k]`` (bool: True may attend; additive float: 0 may attend) -> (index ``[b|1, q, k]``
    int32: entry ``i`` is the key of the query's ``i``-th allowed key (filler past its count), count ``[b|1, q]``
    int32). Cached for the same mask object (masks are built per forward, never changed in place), so the
    layers of one forward compact it once."""
    hit = getattr(_last, "entry", None)
    if hit is not None and hit[0] is mask and hit[1] == k:
        return hit[2]
    allow = mask[:, 0, -q:, -k:]
    if allow.dtype != torch.bool:
        allow = allow > torch.finfo(allow.dtype).min / 2
    cum = allow.to(torch.int32).cumsum(-1, dtype=torch.int32).contiguous()
    want = torch.arange(1, k + 1, device=mask.device, dtype=torch.int32).expand(*cum.shape[:-1], k).contiguous()
    index = torch.searchsorted(cum, want, out_int32=True).clamp_max_(k - 1)
    result = (index, cum[..., -1].contiguous())
    _last.entry = (mask, k, result)
    return result


if triton is not None:
    @triton.jit
    def _row_sum(p, BN: tl.constexpr):
        """Each row's sum of ``p`` ``[rows, BN]`` by the MMA (``p @ ones``): its order is the instruction's, the
        same however many rows the tile has (``tl.sum``'s tree follows the tile's thread layout)."""
        return tl.max(tl.dot(p, tl.full([BN, 16], 1.0, p.dtype)), 1)

    @triton.jit
    def _kernel(Q, K, V, O, IDX, CNT, q_len, k_len, scale,
                sqb, sqh, sqq, skb, skh, skk, svb, svh, svk, sob, soq, soh, sib, siq, scb, scq,
                G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr,
                CAUSAL: tl.constexpr):
        qi = tl.program_id(0)
        kh = tl.program_id(1)
        bi = tl.program_id(2).to(tl.int64)
        rows = tl.arange(0, GP)
        heads = kh * G + rows
        live = rows < G
        dims = tl.arange(0, BD)  # the head size padded to a power of two (zeros)
        dl = dims < D
        qv = tl.load(Q + bi * sqb + heads[:, None] * sqh + qi * sqq + dims[None, :], mask=live[:, None] & dl[None, :],
                     other=0.0)
        if CAUSAL:
            n = k_len - q_len + qi + 1
        else:
            n = tl.load(CNT + bi * scb + qi * scq)
        m = tl.full([GP], float("-inf"), tl.float32)
        lsum = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, BD], tl.float32)
        kbase = K + bi * skb + kh * skh
        vbase = V + bi * svb + kh * svh
        for start in range(0, n, BN):
            offs = start + tl.arange(0, BN)
            ok = offs < n
            if CAUSAL:
                keys = offs
            else:
                keys = tl.load(IDX + bi * sib + qi * siq + offs, mask=ok, other=0)
            kt = tl.load(kbase + keys[:, None].to(tl.int64) * skk + dims[None, :], mask=ok[:, None] & dl[None, :],
                         other=0.0)
            s = tl.dot(qv, tl.trans(kt)) * scale
            s = tl.where(ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            vt = tl.load(vbase + keys[:, None].to(tl.int64) * svk + dims[None, :], mask=ok[:, None] & dl[None, :],
                         other=0.0)
            pv = p.to(vt.dtype)
            lsum = lsum * alpha + _row_sum(pv, BN)
            acc = acc * alpha[:, None] + tl.dot(pv, vt)
            m = m_new
        out = acc / tl.maximum(lsum, 1.1754943508222875e-38)[:, None]
        tl.store(O + bi * sob + qi * soq + heads[:, None] * soh + dims[None, :], out.to(O.dtype.element_ty),
                 mask=live[:, None] & dl[None, :])


    @triton.jit
    def _causal_tiles(Q, K, V, O, q_len, k_len, scale, sqb, sqh, sqq, skb, skh, skk, svb, svh, svk, sob, soq, soh,
                      G: tl.constexpr, BQ: tl.constexpr, R: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                      BN: tl.constexpr):
        """A causal pass's ``BQ`` consecutive queries (all ``G`` heads of one kv head: rows ``(query, head)``, padded
        to ``R``) per program, sharing each block's key/value loads. Each row walks its own keys ``0 .. k-q+query``
        in the per-query kernel's blocks of ``BN`` from key 0; the blocks past a row's last key, read for the
        tile's later queries, leave its state as it was (``p = 0``, ``alpha = 1``): the per-query kernel's bits."""
        t = tl.program_id(0)
        kh = tl.program_id(1)
        bi = tl.program_id(2).to(tl.int64)
        r = tl.arange(0, R)
        qi = t * BQ + r // G
        heads = kh * G + r % G
        live = (r < BQ * G) & (qi < q_len)
        dims = tl.arange(0, BD)
        dl = dims < D
        qv = tl.load(Q + bi * sqb + heads[:, None] * sqh + qi[:, None] * sqq + dims[None, :],
                     mask=live[:, None] & dl[None, :], other=0.0)
        n = k_len - q_len + qi + 1  # each row's key count
        top = k_len - q_len + tl.minimum(t * BQ + BQ, q_len)  # the tile's last query's
        m = tl.full([R], float("-inf"), tl.float32)
        lsum = tl.zeros([R], tl.float32)
        acc = tl.zeros([R, BD], tl.float32)
        kbase = K + bi * skb + kh * skh
        vbase = V + bi * svb + kh * svh
        for start in range(0, top, BN):
            offs = start + tl.arange(0, BN)
            ok = offs < top
            kt = tl.load(kbase + offs[:, None].to(tl.int64) * skk + dims[None, :], mask=ok[:, None] & dl[None, :],
                         other=0.0)
            s = tl.dot(qv, tl.trans(kt)) * scale
            s = tl.where(offs[None, :] < n[:, None], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            vt = tl.load(vbase + offs[:, None].to(tl.int64) * svk + dims[None, :], mask=ok[:, None] & dl[None, :],
                         other=0.0)
            pv = p.to(vt.dtype)
            lsum = lsum * alpha + _row_sum(pv, BN)
            acc = acc * alpha[:, None] + tl.dot(pv, vt)
            m = m_new
        out = acc / tl.maximum(lsum, 1.1754943508222875e-38)[:, None]
        tl.store(O + bi * sob + qi[:, None] * soq + heads[:, None] * soh + dims[None, :], out.to(O.dtype.element_ty),
                 mask=live[:, None] & dl[None, :])


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
              scaling: float) -> torch.Tensor:
    """The same contract as :func:`.attention.attention`: query ``[b, H, q, d]``, key/value ``[b, kvh, k, d]``,
    mask None (causal: the queries are the last ``q`` of ``k`` keys) or ``[b|1, 1, q|1, k]`` -> ``[b, q, H, d]``."""
    b, H, q, d = query.shape
    kvh, k = key.shape[1], key.shape[2]
    g = H // kvh
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    out = torch.empty(b, q, H, d, dtype=query.dtype, device=query.device)
    if mask is None:
        index = count = torch.zeros(1, 1, dtype=torch.int32, device=query.device)
        ib = iq = cb = cq = 0
    else:
        index, count = compact(mask, q, k)
        ib, iq = (index.stride(i) if index.shape[i] > 1 else 0 for i in (0, 1))  # broadcast dims: stride 0
        cb, cq = (count.stride(i) if count.shape[i] > 1 else 0 for i in (0, 1))
    BD = max(16, triton.next_power_of_2(d))
    if mask is None and TILE_ROWS and q > 16:
        tile = max(TILE_ROWS, triton.next_power_of_2(g))
        _causal_tiles[(triton.cdiv(q, tile // g), kvh, b)](
            query, key, value, out, q, k, scaling, *_strides(query, key, value, out),
            G=g, BQ=tile // g, R=tile, D=d, BD=BD, BN=BLOCK_N, num_warps=8)
        return out
    _kernel[(q, kvh, b)](
        query, key, value, out, index, count, q, k, scaling, *_strides(query, key, value, out), ib, iq, cb, cq,
        G=g, GP=max(16, triton.next_power_of_2(g)), D=d, BD=BD, BN=BLOCK_N, CAUSAL=mask is None)
    return out


def _strides(query, key, value, out) -> tuple:
    return (query.stride(0), query.stride(1), query.stride(2), key.stride(0), key.stride(1), key.stride(2),
            value.stride(0), value.stride(1), value.stride(2), out.stride(0), out.stride(1), out.stride(2))
