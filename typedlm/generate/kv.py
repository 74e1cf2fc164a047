"""The decode batch's KV cache: static slots (+ CUDA graphs) for Llama / Qwen2 / Qwen3, else ``BatchKV``.

:class:`StaticKV` is a small gpt-fast-style runner over the model's own modules (embeddings, norms,
projections, MLPs, rotary embedding and lm_head are called as they are: no weight is copied). Only
attention and the cache are ours:

* one preallocated buffer per layer and K/V, ``[capacity, kv_heads, max_len + 1, head_dim]``;
  a row owns one **slot** (batch index) for its life: prefill writes ``[slot, :, :T]``, each decode
  step writes column ``position`` of its slot (``index_put``), eviction marks the slot free (no
  ``index_select``, nothing moves). Column ``max_len`` is scratch: rows of the decode range that are
  not in this call (free slots, or slots another scheduler holds) write there and nothing reads it.
* a decode step covers slots ``[0, B)`` where ``B`` is the bucket (1, 2, 4, …, capacity) above the
  highest slot in use (slots are handed out lowest-first, so the range stays compact), and attends
  over the first ``L`` columns, ``L`` the power-of-two bucket (>= 256) above the longest row; the
  mask is ``column <= position`` per row. Grouped-query attention is two batched matmuls over the
  ``[B, kv_heads, group, ·]`` view (no K/V expansion).
* on CUDA each ``(B, L)`` decode step is captured once as a CUDA graph (``capture()`` at warm-up
  does every bucket up to a length; a bucket first met later is captured then); a step copies the
  ids/positions into the graph's input buffers, replays, and gathers the rows it asked for out of
  the graph's output (a copy, so the next replay cannot overwrite what the caller holds).

Prefill (eager, variable length): rows of one length start at position 0, causal SDPA over their
own keys, K/V written into their slots, logits of the last position only. A step where some row
feeds several tokens (forced: jump-forward, end of reasoning) takes the same eager path from each
row's length on (right-padded; padding writes the scratch column; no graph).

Measured on the H200 (random Qwen2.5-7B, bf16; ``bench/results/gen-h200.md``, ``bench/gpu_profile.py``):
this runner 202 / 1,410 / 5,129 tok/s at batch 1 / 8 / 32 vs HF ``generate`` with its static cache and
compile 146 / 981 / 2,857 (whose cache has one position per batch, so rows cannot join or leave).
Eager layers in the graphs: 132 tok/s at b1 (1,100 small kernels, 2 ms of graph launch); one compiled
layer: 199 (capture 16-32 s); the whole 28-layer step compiled: 175 and 152 s of compile.

``make_kv`` picks :class:`StaticKV` when the model family is supported, else the dynamic
:class:`~typedlm.generate.batch_cache.BatchKV` (left-padded ``DynamicCache``). One ``StaticKV`` per
engine (``Engine.static_kv``), shared by every scheduler of that engine through ``acquire``/``release``.
"""

from __future__ import annotations

import os
import threading
import time

import torch
import torch.nn.functional as F

from .. import placement
from ..engine import Engine
from ..errors import TypedLMError
from .batch_cache import BatchKV
from .sampling import device_tensor

FAMILIES = ("llama", "qwen2", "qwen3")
MIN_BUCKET = 256


def kv_len_default(engine: Engine) -> int:
    return min(engine.max_context, int(os.environ.get("TYPEDLM_KV_LEN", "4096")))


def supported(engine: Engine) -> str | None:
    """None when :class:`StaticKV` can run this model, else the reason it cannot."""
    cfg = engine.model.config
    if placement.is_placed(engine.model):
        return "quantized or spread over several devices (StaticKV fuses plain weights on one device)"
    if cfg.model_type not in FAMILIES:
        return f"model type {cfg.model_type!r} is not one of {FAMILIES}"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r}"
    if getattr(cfg, "use_sliding_window", False) or "sliding_attention" in (getattr(cfg, "layer_types", None) or ()):
        return "sliding-window attention"
    rope = (getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", "linear", "llama3"):
        return f"rope type {rope.get('rope_type')!r}"
    return None


def make_kv(engine: Engine, max_batch: int):
    """The KV backend for a scheduler of ``max_batch`` rows."""
    if supported(engine) is not None:
        return BatchKV(engine, max_batch)
    with _LOCK:
        kv = engine.static_kv.get("kv")
        if kv is None or (kv.capacity < max_batch and kv.idle):
            # the smaller one is replaced, not freed: a scheduler made earlier may still hold it (idle
            # only means no row now) and decodes on it later; it goes when its last holder does
            kv = StaticKV(engine, max(max_batch, kv.capacity if kv else 1), kv_len_default(engine))
            engine.static_kv["kv"] = kv
        elif kv.capacity < max_batch:
            raise TypedLMError(f"the engine's static KV holds {kv.capacity} rows and is in use; "
                               f"a scheduler of {max_batch} rows cannot start now")
        return kv


_LOCK = threading.Lock()


def _bucket(n: int, top: int) -> int:
    b = 1
    while b < n:
        b *= 2
    return min(b, top)


class StaticKV:
    def __init__(self, engine: Engine, capacity: int, max_len: int):
        m = engine.model
        self.engine, self.capacity, self.max_len = engine, capacity, max_len
        self.dev = engine.device
        self.base = m.model
        self.layers = list(self.base.layers)
        a = self.layers[0].self_attn
        cfg = m.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = a.head_dim
        self.scaling = a.scaling
        self.qk_norm = hasattr(a, "q_norm")
        shape = (capacity, self.kv_heads, max_len + 1, self.head_dim)
        self.k = [torch.zeros(shape, dtype=engine.dtype, device=self.dev) for _ in self.layers]
        self.v = [torch.zeros(shape, dtype=engine.dtype, device=self.dev) for _ in self.layers]
        self.length = [0] * capacity  # tokens in each slot's KV
        self._free = list(range(capacity))
        self._held: set[int] = set()
        self._lock = threading.RLock()
        self._cols = torch.arange(max_len + 1, device=self.dev)
        self._rows = torch.arange(capacity, device=self.dev)
        self._io = torch.zeros(2, capacity, dtype=torch.long, device=self.dev)  # graph inputs: ids, positions
        self._host = torch.zeros(2, capacity, dtype=torch.long, pin_memory=self.dev.type == "cuda")
        self.graphs: dict[tuple[int, int], tuple] = {}
        self._pool = None
        self.capture_s = 0.0
        self.eps = float(getattr(cfg, "rms_norm_eps", 1e-6))
        self.weights = [_fuse(layer) for layer in self.layers]
        # on CUDA one decoder layer is compiled once (inductor fuses norms, rope, softmax, SiLU) and
        # shared by every layer and bucket; TYPEDLM_COMPILE_DECODE=0 keeps it eager (measured: see
        # docs/ARCHITECTURE.md)
        self._layer = _layer
        if self.dev.type == "cuda" and os.environ.get("TYPEDLM_COMPILE_DECODE", "1") == "1":
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
            self._layer = torch.compile(_layer, dynamic=True)

    # -- slots (any thread) -----------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        return not self._held

    @property
    def size(self) -> int:
        return len(self._held)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def acquire(self) -> int:
        with self._lock:
            self._free.sort()
            slot = self._free.pop(0)  # lowest first: the decode range stays compact
            self._held.add(slot)
            self.length[slot] = 0
            return slot

    def release(self, slot: int) -> None:
        with self._lock:
            if slot in self._held:
                self._held.discard(slot)
                self._free.append(slot)

    # -- the scheduler's KV interface -------------------------------------------------------------
    def keep(self, indices: list[int]) -> None:
        """Eviction is ``release`` of the slot; nothing moves."""

    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, slots: list[int]) -> torch.Tensor:
        """Rows of one length into fresh slots -> float32 logits ``[g, V]`` of their last position."""
        g, t = ids.shape
        if t > self.max_len:
            raise TypedLMError(f"prompt of {t} tokens is longer than the static KV ({self.max_len}; TYPEDLM_KV_LEN)")
        with self._lock:
            for s in slots:
                self.length[s] = 0
            return self._extend(ids, slots, [t] * g)

    @torch.inference_mode()
    def step(self, tokens: list[list[int]], slots: list[int], every: bool = False) -> torch.Tensor:
        """Each row's new tokens into its slot -> float32 logits ``[len(slots), V]`` after each row's
        last token (a private copy; ``every``: ``[len(slots), k, V]`` after each fed position). One
        token per row: the graph path; a row with several (forced tokens, jump-forward drafts): the
        eager path, like a prefill that starts at each row's length."""
        with self._lock:
            longest = max(self.length[s] + len(t) for s, t in zip(slots, tokens))
            if longest > self.max_len:
                raise TypedLMError(f"a row reached the static KV length ({self.max_len}; TYPEDLM_KV_LEN)")
            if every or any(len(t) > 1 for t in tokens):
                k = max(len(t) for t in tokens)
                ids = torch.tensor([t + [0] * (k - len(t)) for t in tokens], dtype=torch.long)
                return self._extend(ids.to(self.dev), slots, [len(t) for t in tokens], every)
            top = max(slots) + 1
            if self.dev.type == "cuda":
                b, cols = _bucket(top, self.capacity), max(MIN_BUCKET, _bucket(longest, 1 << 30))
                cols = min(cols, self.max_len)
            else:  # eager on the CPU: exact sizes, no padding
                b, cols = top, longest
            host = self._host
            host[0, :b] = 0
            host[1, :b] = self.max_len  # rows not in this call write the scratch column
            for s, (tok,) in zip(slots, tokens):
                host[0, s] = tok
                host[1, s] = self.length[s]
                self.length[s] += 1
            self._io[:, :b].copy_(host[:, :b], non_blocking=True)
            if self.dev.type == "cuda":
                out = self._replay(b, cols)
            else:
                out = self._decode(b, cols)
            if slots == list(range(len(slots))):
                return out[: len(slots)].clone()  # a copy: the next replay overwrites ``out``
            return out[device_tensor(slots, self.dev)]

    def truncate(self, drop: list[int], slots: list[int]) -> None:
        """Forget the last ``drop[i]`` tokens of ``slots[i]`` (rejected jump-forward drafts): only the
        length moves back; the stale columns are past every later mask and get overwritten."""
        with self._lock:
            for s, n in zip(slots, drop):
                self.length[s] -= n

    def _extend(self, ids: torch.Tensor, slots: list[int], lens: list[int], every: bool = False) -> torch.Tensor:
        """Eager forward of ``ids`` ([n, k], row i's first ``lens[i]`` real, the rest padding) at
        positions ``length[slot]`` on; K/V go into each row's slot (padding into the scratch column);
        attention covers each row's earlier columns and its own new ones causally. Returns float32
        logits after each row's last real token (``every``: after every position) and advances ``length``."""
        n, k = ids.shape
        slot_t = device_tensor(slots, self.dev)
        starts = [self.length[s] for s in slots]
        fresh = not any(starts) and all(x == k for x in lens)  # a prefill: causal over its own keys only
        width = max(st + x for st, x in zip(starts, lens))
        cols = torch.arange(k, device=self.dev)
        pos = device_tensor(starts, self.dev).view(n, 1) + cols
        write = torch.where(cols < device_tensor(lens, self.dev).view(n, 1), pos, self.max_len)
        visible = None if fresh else self._cols[:width].view(1, 1, 1, width) <= pos.view(n, 1, k, 1)
        h = self.base.embed_tokens(ids)
        cos, sin = self.base.rotary_emb(h, pos)
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            q, kk, v = self._qkv(a, layer.input_layernorm(h), cos, sin)
            if fresh:
                self.k[i][slot_t, :, :k] = kk
                self.v[i][slot_t, :, :k] = v
                o = F.scaled_dot_product_attention(q, kk, v, is_causal=True, scale=self.scaling, enable_gqa=True)
            else:
                self.k[i][slot_t.view(n, 1), :, write] = kk.transpose(1, 2)
                self.v[i][slot_t.view(n, 1), :, write] = v.transpose(1, 2)
                o = F.scaled_dot_product_attention(q, self.k[i][slot_t, :, :width], self.v[i][slot_t, :, :width],
                                                   attn_mask=visible, scale=self.scaling, enable_gqa=True)
            h = h + a.o_proj(o.transpose(1, 2).reshape(n, k, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        for s, x in zip(slots, lens):
            self.length[s] += x
        if every:
            return self.engine.model.lm_head(self.base.norm(h)).float()
        last = h[:, -1] if fresh else h[torch.arange(n, device=self.dev), device_tensor(lens, self.dev) - 1]
        return self.engine.model.lm_head(self.base.norm(last)).float()

    # -- CUDA graphs ------------------------------------------------------------------------------
    def capture(self, max_tokens: int | None = None, batches: list[int] | None = None) -> float:
        """Capture every (batch, length) bucket up to ``max_tokens`` columns (default: all); seconds."""
        if self.dev.type != "cuda":
            return 0.0
        only = batches
        top = min(self.max_len, max_tokens or self.max_len)
        t0 = time.perf_counter()
        b = 1
        batches = []
        while True:
            batches.append(min(b, self.capacity))
            if b >= self.capacity:
                break
            b *= 2
        cols = []
        c = min(MIN_BUCKET, self.max_len)
        while True:
            cols.append(min(c, self.max_len))
            if c >= top:
                break
            c *= 2
        batches = [b for b in batches if only is None or b in only]
        with self._lock, torch.inference_mode():
            for b in reversed(batches):
                for c in reversed(cols):
                    self._graph(b, c)
        torch.cuda.synchronize(self.dev)
        return time.perf_counter() - t0

    def _graph(self, b: int, cols: int):
        key = (b, cols)
        if key not in self.graphs:
            t0 = time.perf_counter()
            self._io[0, :b] = 0
            self._io[1, :b] = self.max_len
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            s = torch.cuda.Stream(self.dev)
            s.wait_stream(torch.cuda.current_stream(self.dev))
            with torch.cuda.stream(s):
                for _ in range(2):
                    self._decode(b, cols)
            torch.cuda.current_stream(self.dev).wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self._pool):
                out = self._decode(b, cols)
            self.graphs[key] = (g, out)
            self.capture_s += time.perf_counter() - t0
        return self.graphs[key]

    def _replay(self, b: int, cols: int) -> torch.Tensor:
        if (b, cols) not in self.graphs:
            # inputs were already staged for this step: keep them across the capture's warm-up runs
            saved = self._io[:, :b].clone()
            self._graph(b, cols)
            self._io[:, :b].copy_(saved)
        g, out = self.graphs[(b, cols)]
        g.replay()
        return out

    # -- the model ----------------------------------------------------------------------------------
    def _qkv(self, a, x, cos, sin):
        b, t, _ = x.shape
        q = a.q_proj(x).view(b, t, -1, self.head_dim)
        k = a.k_proj(x).view(b, t, -1, self.head_dim)
        v = a.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        if self.qk_norm:
            q, k = a.q_norm(q), a.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def _decode(self, b: int, cols: int) -> torch.Tensor:
        ids, pos = self._io[0, :b].view(b, 1), self._io[1, :b].view(b, 1)
        rows = self._rows[:b]
        h = self.base.embed_tokens(ids)
        cos, sin = self.base.rotary_emb(h, pos)
        hidden = self._cols[:cols].view(1, 1, 1, cols) > pos.view(b, 1, 1, 1)  # [b, 1, 1, cols]
        for i, w in enumerate(self.weights):
            h = self._layer(h, cos, sin, hidden, rows, pos[:, 0], self.k[i], self.v[i], *w,
                            self.eps, self.scaling, self.heads, self.kv_heads, self.head_dim, cols)
        return self.engine.model.lm_head(self.base.norm(h[:, 0])).float()


def _fuse(layer) -> tuple:
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


def _rms(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _layer(h, cos, sin, hidden, rows, pos, kc, vc, n1, qkv_w, qkv_b, qn, kn, o_w, o_b, n2, gu_w, d_w,
           eps: float, scaling: float, heads: int, kv_heads: int, hd: int, cols: int):
    """One decoder layer for one new token per row ([b, 1, hidden]), the same math as the model's
    modules: RMSNorm, fused q/k/v, (q/k norm), RoPE, K/V written at ``pos`` of each row's slot,
    grouped attention over the first ``cols`` columns, o_proj, RMSNorm, SiLU-gated MLP."""
    b = h.shape[0]
    x = _rms(h, n1, eps)
    qkv = F.linear(x, qkv_w, qkv_b)
    q, k, v = qkv.split([heads * hd, kv_heads * hd, kv_heads * hd], dim=-1)
    q, k, v = q.view(b, heads, hd), k.view(b, kv_heads, hd), v.view(b, kv_heads, hd)
    if qn is not None:
        q, k = _rms(q, qn, eps), _rms(k, kn, eps)
    c, s_ = cos.view(b, 1, hd), sin.view(b, 1, hd)
    q = q * c + _rotate_half(q) * s_
    k = k * c + _rotate_half(k) * s_
    kc[rows, :, pos] = k
    vc[rows, :, pos] = v
    qg = q.view(b, kv_heads, heads // kv_heads, hd)
    att = torch.matmul(qg, kc[:b, :, :cols].transpose(-1, -2)).float() * scaling
    att = att.masked_fill(hidden, float("-inf")).softmax(-1).to(q.dtype)
    o = torch.matmul(att, vc[:b, :, :cols])  # [b, kv_heads, group, hd]
    h = h + F.linear(o.reshape(b, 1, heads * hd), o_w, o_b)
    x = _rms(h, n2, eps)
    gate, up = F.linear(x, gu_w).chunk(2, dim=-1)
    return h + F.linear(F.silu(gate) * up, d_w)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
