"""A short prefill on the static slots as a CUDA graph, one replay a row: a prompt's tail after its cached
prefix (a chat sharing a long system prompt), or a short prompt.

Why: an eager forward of a few tokens is bound by the host's kernel launches, not the GPU: eagerly, the few
new tokens after a long cached prefix can take longer than the whole prompt uncached; one graph replay a row
removes the launches (numbers: docs/benchmarks.md, ``bench/scripts/ttft_profile.py``).

How: the tokens are padded to a bucket of :data:`BUCKETS` (padding writes the slot's scratch column, as in
a decode step) and attend over the first ``cols`` columns of the row's slot (a column bucket, as in decode)
with the mask ``column <= position``, after their own K/V are written; one graph per ``(tokens, cols)``
bucket, captured on first use or at ``capture``. The layer math is the decode step's (fused weights,
RMSNorm, RoPE, grouped attention in fp32 softmax) for ``t`` tokens of one row, compiled as the decode
layer is (``TYPEDLM_COMPILE_DECODE=0`` keeps it eager). On the CPU the same code
runs eagerly at exact sizes when switched on (tests compare it with the eager prefill); by default the CPU
keeps the eager prefill, where nothing is gained. ``TYPEDLM_SHORT_PREFILL=0`` turns it off on CUDA; deterministic
generation (``StaticKV(invariant=True)``) never uses it.
"""

from __future__ import annotations


import torch

from .compiled import compiled_layer
from .graphs import DecodeGraphs, MIN_BUCKET, bucket, column_buckets
from .layers import out_mlp, qkv_rope
from .tensors import device_tensor

BUCKETS = (16, 32, 64, 128)  # tokens of a short prefill (more: the eager prefill, bound by the GPU anyway)
# what a (tokens, cols) bucket changes (compiled.compiled_layer): the tokens of h, cos, sin, visible, pos; visible's columns
DIMS = {0: (1,), 1: (1,), 2: (1,), 3: (0, 1), 5: (0,)}


def extend_layer(h, cos, sin, visible, slot, pos, kc, vc, n1, qkv_w, qkv_b, qn, kn, o_w, o_b, n2, gu_w, d_w,
                 eps: float, scaling: float, heads: int, kv_heads: int, hd: int):
    """One decoder layer for ``t`` new tokens of one row (``h`` ``[1, t, hidden]``) at positions ``pos``
    ``[t]`` of slot ``slot`` (``[1]``): K/V written first, then each token attends over the first ``cols``
    columns where ``visible`` (``[t, cols]``) allows."""
    t, group, cols = h.shape[1], heads // kv_heads, visible.shape[-1]
    q, k, v = qkv_rope(h, n1, qkv_w, qkv_b, qn, kn, cos, sin, eps, heads, kv_heads, hd)
    kc[slot, :, pos] = k
    vc[slot, :, pos] = v
    qg = q.view(t, kv_heads, group, hd).permute(1, 2, 0, 3).reshape(kv_heads, group * t, hd)
    att = torch.matmul(qg, kc[slot, :, :cols][0].transpose(-1, -2)).float() * scaling  # [kv_heads, group*t, cols]
    att = att.view(kv_heads, group, t, cols).masked_fill(~visible, float("-inf")).softmax(-1).to(q.dtype)
    o = torch.matmul(att.view(kv_heads, group * t, cols), vc[slot, :, :cols][0])  # [kv_heads, group*t, hd]
    o = o.view(kv_heads, group, t, hd).permute(2, 0, 1, 3).reshape(1, t, heads * hd)
    return out_mlp(h, o, o_w, o_b, n2, gu_w, d_w, eps)


class ShortPrefill:
    """Short one-row prefills on static slots (``kv``: their :class:`~typedlm.runner.static_forwards.StaticForwards`),
    graphed on CUDA."""

    def __init__(self, kv, *, enabled: bool):
        self.kv, dev = kv, kv.dev
        # not in deterministic generation: its GEMMs and attention are the fast, shape-dependent ones
        self.enabled = dev.type == "cuda" and not kv.invariant and enabled
        top = BUCKETS[-1]
        # inputs: ids, positions (padding: the scratch column), the slot (column 0), the last real token (column 0)
        self._io = torch.zeros(4, top, dtype=torch.long, device=dev)
        self.graphs = DecodeGraphs(dev, self._run, self._reset, self._io, after_capture=kv.release_compile_workers)
        self._layer = extend_layer
        if self.enabled and kv.compile_decode:  # as the decode step's layer
            self._layer = compiled_layer(extend_layer, DIMS)

    def fits(self, rows: int, tokens: int) -> bool:
        """Rows of ``tokens`` new tokens each go through the graphs, one replay a row (up to 4 rows)."""
        return self.enabled and rows <= 4 and 0 < tokens <= BUCKETS[-1]

    def run(self, ids: torch.Tensor, slot: int, start: int) -> torch.Tensor:
        """``ids`` ``[t]`` (on the device) at positions ``start``.. of ``slot`` -> float32 logits ``[1, V]`` of the
        last one. The caller holds the cache's lock and checked the length."""
        kv, t = self.kv, int(ids.shape[0])
        cuda = kv.dev.type == "cuda"
        b = bucket(t, BUCKETS[-1]) if cuda else t
        b = max(b, BUCKETS[0]) if cuda else b
        cols = min(max(MIN_BUCKET, bucket(start + t, 1 << 30)), kv.max_len) if cuda else start + t
        pad = [0] * (b - 1)
        # staged in a fresh pinned buffer: rows prefilled back to back queue their copies before any runs
        self._io[1:, :b].copy_(device_tensor([list(range(start, start + t)) + [kv.max_len] * (b - t),
                                              [slot, *pad], [t - 1, *pad]], kv.dev))
        self._io[0, :b].zero_()
        self._io[0, :t].copy_(ids)
        out = self.graphs.replay(b, cols) if cuda else self._run(b, cols)
        kv.length[slot] = start + t
        return out.clone()  # the next replay overwrites ``out``

    def capture(self, top: int) -> None:
        """Every (tokens, cols) bucket up to ``top`` columns (the server's warm-up: no request pays a capture)."""
        if self.enabled:
            self.graphs.capture(list(BUCKETS), column_buckets(top, self.kv.max_len))

    def _reset(self, b: int) -> None:
        self._io[:, :b] = 0
        self._io[1, :b] = self.kv.max_len

    def _run(self, b: int, cols: int) -> torch.Tensor:
        kv = self.kv
        ids, pos = self._io[0, :b].view(1, b), self._io[1, :b]
        slot, last = self._io[2, :1], self._io[3, :1]
        h = kv.base.embed_tokens(ids)
        cos, sin = kv.base.rotary_emb(h, pos.view(1, b))
        visible = kv._cols[:cols].view(1, cols) <= pos.view(b, 1)  # [b, cols]
        for i, w in enumerate(kv.weights):
            h = self._layer(h, cos, sin, visible, slot, pos, kv.k[i], kv.v[i], *w, kv.eps, kv.scaling, kv.heads,
                             kv.kv_heads, kv.head_dim)
        return kv.model.lm_head(kv.base.norm(h[0].index_select(0, last))).float()
