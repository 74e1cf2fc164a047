"""A decision's scoring pass on a cached prompt prefix as a CUDA graph (batch-invariant scoring, Llama / Qwen2 /
Qwen3): the context's uncached tokens and the plan's row tree, one replay.

Why: after the first call on a schema the plan prefix (~830 tokens) comes from the prefix cache and a decision's
one forward holds only ~170 context tokens and the ~110-token row tree; eagerly that forward's ~1,000 launches of
the invariant kernels cost the host about as long as the GPU needs for them; one replay removes that host time
(numbers: docs/benchmarks.md, ``bench/scripts/score_graph_check.py``).

How: the pass's tokens are padded to a bucket of :data:`BUCKETS` and its keys to a power-of-two column bucket
(>= 256) of one static buffer ``[layers, 2, 1, kv_heads, columns + 1, head_dim]``: the cached prefix is copied
into its first ``m`` columns, the pass writes its own K/V at columns ``m ..`` (padding rows: the scratch column,
never read) and attends under the pass's allowed-attention matrix (padding: no key at all). The layers run the
modules' own math on the invariant ops (:meth:`ScoreGraphs._layer`: :mod:`.layers`' ``qkv_rope`` / ``out_mlp``
with the invariant GEMM and RMSNorm, the invariant attention), except that q/k/v and gate/up are one GEMM each
(the weights are already views of fused tensors: :func:`.layers.fuse`); a model the fused code does not cover
(:func:`fused_ok`) runs its modules (``layer(hidden, mask, positions, cache)`` under the hooks of
:mod:`.invariant.mode`) with this module's buffer as their cache. **Bit-identical to the eager pass**, by
construction of the invariant kernels: a row's GEMM and RMSNorm results do not depend on the row count (padding)
nor, per output element, on the weight's other columns (the fused GEMMs), a query's attention only on its own
ordered list of allowed keys (the same columns hold the same K/V here), and the lm_head reads the same rows. Tested
on the CPU (the torch invariant ops, run eagerly at the padded sizes) and on the H200 (``bench/gpu_check.py``,
``bench/scripts/score_graph_check.py``: a pass's logits and K/V, graph vs eager, max |diff|).
One graph per ``(tokens, columns)`` bucket, captured on first use; one pass at a time (a lock).
``TYPEDLM_SCORE_GRAPH=0`` turns it off.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from .graphs import DecodeGraphs, MIN_BUCKET, bucket, column_buckets
from .invariant import mode as invariant
from .layers import fuse, out_mlp, qkv_rope
from .prefix_cache import from_hf
from .tensors import device_tensor, to_device

# tokens of a graphed pass: powers of two, then steps of 64 above 256 (a later decision's ~280-token pass pays 320
# rows, not 384: the attention, the elementwise ops, and the GEMMs where the table's tiles for 257-320 rows are
# shorter than 128; gemm_configs.json's buckets follow these, bench/scripts/gemm_sweep.py). 9 token buckets at most.
BUCKETS = (16, 32, 64, 128, 256, 320, 384, 448, 512)


class _Columns:
    """The cache the model's attention modules write into: each layer's K/V of this pass go to ``col`` of
    the static buffer; attention reads its first ``cols`` columns."""

    def __init__(self, kv: torch.Tensor, col: torch.Tensor, cols: int):
        self.kv, self.col, self.cols = kv, col, cols

    def update(self, key, value, layer_idx: int, *args, **kwargs):
        buf = self.kv[layer_idx]  # [2, 1, kv_heads, columns + 1, head_dim]
        buf[0][:, :, self.col] = key
        buf[1][:, :, self.col] = value
        return buf[0][:, :, :self.cols], buf[1][:, :, :self.cols]


class ScoreGraphs:
    """Graphed invariant scoring passes of ``model`` (the runner's; hooked by :mod:`.invariant.mode`)."""

    def __init__(self, model, *, device: torch.device, dtype: torch.dtype, max_len: int, settings):
        self.model, self.device, self.dtype, self.max_len = model, device, dtype, max_len
        self.enabled = device.type == "cuda" and settings.score_graph
        self.base = model.model
        self.layers = list(self.base.layers)
        params = inspect.signature(self.layers[0].forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        # the layers' q/k/v and gate/up as one GEMM each (layers.fuse: views of one tensor, shared with the static
        # KV; fusing here, before any lookup, keeps the prefix cache's weights stamp); None: the modules' own code
        self._fused = [fuse(layer) for layer in self.layers] if settings.score_graph_fused and fused_ok(model) else None
        self.weights = self._fused
        self._kv = None  # the static buffer, made on first use
        self._held = None  # a weak reference to the KV the last pass returned (its prefix stays in the buffer)
        top = BUCKETS[-1]
        self._io = torch.zeros(4, top, dtype=torch.long, device=device)  # ids, positions, K/V column, rows read
        self._allow = torch.zeros(top, max_len, dtype=torch.bool, device=device)
        self.graphs = DecodeGraphs(device, self._run, self._reset, self._io, capture_mode="thread_local")
        self._lock = threading.Lock()
        self.passes = 0  # passes run here (tests, benches)

    def use_fused(self, on: bool) -> bool:
        """The fused layer code (default where :func:`fused_ok`) or the modules' own (benches, tests compare them);
        graphs captured with the other are dropped. Returns whether the fused code runs."""
        weights = self._fused if on else None
        if weights is not self.weights:
            with self._lock:
                self.weights = weights
                self.graphs.clear()
        return self.weights is not None

    def fits(self, cached: int, new: int) -> bool:
        """A pass of ``new`` tokens after ``cached`` prefix tokens goes through a graph."""
        return self.enabled and 0 < new <= BUCKETS[-1] and cached + new <= self.max_len

    def run(self, past: torch.Tensor | None, ids: list[int], positions: list[int], allow: torch.Tensor,
            read: list[int], keep: int):
        """The pass of ``ids`` (per-token ``positions``; ``allow`` ``[n, m + n]`` bool over the ``m`` cached keys
        ``past`` ``[layers, 2, kv_heads, m, head_dim]`` (or a transformers cache, or None; not copied in when the
        buffer holds it: :meth:`_holds`) then the pass's own) -> (logits ``[len(read), V]`` at pass positions
        ``read``, the first ``keep`` tokens' KV ``[layers, 2, kv_heads, keep, head_dim]``). The graph's outputs are
        read before the lock is let go (the next replay overwrites them)."""
        n, m = len(ids), _length(past)
        b, cols = self.shape(n, m)
        with self._lock:
            self._buffer()
            cuda = self.device.type == "cuda"
            graph = self.graphs.get(b, cols) if cuda else None  # captured before the inputs are staged
            self.stage(past, ids, positions, allow, read, b, cols)
            if cuda:
                graph[0].replay()
                hidden = graph[1]
            else:
                hidden = self._run(b, cols)
            return self.finish(hidden, len(read), keep)

    def shape(self, n: int, m: int) -> tuple[int, int]:
        """(token bucket, column bucket) of a pass of ``n`` tokens after ``m`` cached ones."""
        return bucket_of(n), min(max(MIN_BUCKET, bucket(m + n, 1 << 30)), self.max_len)

    def stage(self, past, ids: list[int], positions: list[int], allow: torch.Tensor, read: list[int], b: int,
              cols: int) -> None:
        """A pass's inputs into the buffers (under the lock, after any capture): the prefix's K/V unless held."""
        n, m = len(ids), _length(past)
        if past is not None and not self._holds(past, m):
            self._kv[:, :, 0, :, :m].copy_(past if isinstance(past, torch.Tensor) else from_hf(past, 0, 0, m))
        pad = b - n
        self._io[:, :b].copy_(device_tensor([ids + [0] * pad, positions + [0] * pad,
                                             list(range(m, m + n)) + [self.max_len] * pad,
                                             read + [0] * (b - len(read))], self.device))
        self._allow[:b, :cols].zero_()
        self._allow[:n, :m + n].copy_(to_device(allow, self.device))

    def finish(self, hidden: torch.Tensor, reads: int, keep: int):
        """-> (logits at the ``reads`` rows read, the first ``keep`` tokens' KV, a copy): the lm_head on the rows
        read only, outside the graph (their count varies more than the pass's)."""
        self.passes += 1
        logits = self.model.lm_head(hidden.index_select(0, self._io[3, :reads]))
        kv = self._kv[:, :, 0, :, :keep].clone()
        self._held = weakref.ref(kv)
        return logits, kv

    def _holds(self, past, m: int) -> bool:
        """Is ``past`` (its first ``m`` tokens) already in the buffer's first columns? It is when it is (a view of)
        the KV the last pass returned: the next chunk of a prompt or a pass goes on without copying its prefix in."""
        held = self._held() if self._held is not None else None
        if held is None or m > held.shape[3]:
            return False
        t = past if isinstance(past, torch.Tensor) else past.layers[0].keys
        return t.untyped_storage().data_ptr() == held.untyped_storage().data_ptr()

    def capture(self) -> None:
        """Every (tokens, columns) bucket's graph now (warm-up), so no decision pays a capture."""
        with self._lock:
            self._buffer()
            for b in BUCKETS:
                for cols in column_buckets(self.max_len, self.max_len):
                    self.graphs.get(b, cols)
        torch.cuda.synchronize(self.device)

    def _buffer(self) -> None:
        if self._kv is None:
            cfg, a = self.model.config, self.layers[0].self_attn
            self._kv = torch.zeros(len(self.layers), 2, 1, cfg.num_key_value_heads, self.max_len + 1, a.head_dim,
                                   dtype=self.dtype, device=self.device)

    def reset_all(self) -> None:
        """Harmless inputs in every row (K/V to the scratch column), before a capture's warm-up runs."""
        self._reset(self._io.shape[1])

    def _reset(self, b: int) -> None:
        self._io[:, :b] = 0
        self._io[2, :b] = self.max_len  # K/V to the scratch column

    def _run(self, b: int, cols: int) -> torch.Tensor:
        ids, pos, col = self._io[0, :b], self._io[1, :b], self._io[2, :b]
        mask = self._allow[:b, :cols].view(1, 1, b, cols)
        h = self.base.embed_tokens(ids.view(1, b))
        pe = self.base.rotary_emb(h, pos.view(1, b))
        if self.weights is not None:
            for i, w in enumerate(self.weights):
                h = self._layer(i, h, w, pe, mask, col, cols)
            return self.base.norm(h)[0]
        cache = {self._cache_kw: _Columns(self._kv, col, cols)}
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_ids=pos.view(1, b), use_cache=True, position_embeddings=pe,
                      **cache)
            h = h[0] if isinstance(h, tuple) else h
        return self.base.norm(h)[0]  # [b, hidden]: the final norm of every row (the lm_head reads some)

    def _layer(self, i: int, h: torch.Tensor, w: tuple, pe, mask: torch.Tensor, col: torch.Tensor, cols: int):
        """Decoder layer ``i`` on ``h`` ``[1, b, hidden]`` with fused q/k/v and gate/up GEMMs: the ops of the
        module's own forward under the invariant hooks, one for one (the same RMSNorm, RoPE, K/V columns,
        attention, residual adds), except that q/k/v (and gate/up) are one invariant GEMM: each output element's
        reduction is the same whatever other columns the weight has (torch row tiles on the CPU; on the H200 the
        Triton GEMM's ``BK`` 64 and 128 and cuBLAS give the same bits, ``bench/scripts/gemm_sweep.py``;
        checked per pass by ``bench/scripts/score_graph_check.py``). ``TYPEDLM_SCORE_GRAPH_FUSED=0``: the modules."""
        n1, qkv_w, qkv_b, qn, kn, o_w, o_b, n2, gu_w, d_w = w
        layer = self.layers[i]
        a, b, cfg = layer.self_attn, h.shape[1], self.model.config
        heads, kv_heads, eps = cfg.num_attention_heads, cfg.num_key_value_heads, layer.input_layernorm.variance_epsilon
        q, k, v = qkv_rope(h, n1, qkv_w, qkv_b, qn, kn, pe[0], pe[1], eps, heads, kv_heads, a.head_dim,
                           linear=invariant.linear, norm=invariant.rms_norm)
        buf = self._kv[i]  # as _Columns.update: this pass's K/V to its columns, attention over the first cols
        buf[0][0, :, col] = k.transpose(0, 1)
        buf[1][0, :, col] = v.transpose(0, 1)
        o = invariant.attention(q.transpose(0, 1)[None], buf[0][:, :, :cols], buf[1][:, :, :cols], mask, a.scaling)
        return out_mlp(h, o.reshape(1, b, heads * a.head_dim), o_w, o_b, n2, gu_w, d_w,
                       layer.post_attention_layernorm.variance_epsilon, linear=invariant.linear,
                       norm=invariant.rms_norm)


def fused_ok(model) -> bool:
    """The fused layer code computes ``model``'s layers: no MLP biases (``layers.out_mlp`` has none), RMSNorm eps
    the same in a layer's norms."""
    for layer in model.model.layers:
        mlp, a = layer.mlp, layer.self_attn
        if any(getattr(m, "bias", None) is not None for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
            return False
        norms = [layer.post_attention_layernorm] + [getattr(a, x) for x in ("q_norm", "k_norm") if hasattr(a, x)]
        if any(getattr(m, "variance_epsilon", None) != layer.input_layernorm.variance_epsilon for m in norms):
            return False
    return True


@dataclass(eq=False)
class Ride:
    """A scoring chunk to ride in a decode step's forward (:mod:`.mixed`): :meth:`ScoreGraphs.run`'s inputs; ``out``
    its (logits, KV) once a forward carried it (None: it did not ride; the job runs it itself)."""

    past: Any
    ids: list[int]
    positions: list[int]
    allow: torch.Tensor
    read: list[int]
    keep: int
    out: tuple | None = None


def _length(past) -> int:
    """Tokens of a pass's prefix: None, a KV tensor ``[layers, 2, kv_heads, m, head_dim]`` or a transformers cache."""
    if past is None:
        return 0
    return int(past.shape[3]) if isinstance(past, torch.Tensor) else int(past.layers[0].keys.shape[-2])


def bucket_of(n: int) -> int:
    return next(b for b in BUCKETS if b >= n)
