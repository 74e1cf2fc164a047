"""StaticForwards: the model run on a :class:`~typedlm.runner.static_kv.StaticKV` — a gpt-fast-style decode
over the model's own modules (Llama / Qwen2 / Qwen3).

Embeddings, norms, projections, MLPs, rotary embedding and lm_head are called as they are (no weight
is copied: :func:`~typedlm.runner.layers.fuse`); only attention and the cache are ours:

* a decode ``step`` covers slots ``[0, B)`` where ``B`` is the bucket (1, 2, 4, …, capacity) above the
  highest slot in use, and attends over the first ``L`` columns, ``L`` the power-of-two bucket (>= 256)
  above the longest row; the mask is ``column <= position`` per row. Grouped-query attention is two
  batched matmuls over the ``[B, kv_heads, group, ·]`` view (no K/V expansion). On CUDA each ``(B, L)``
  step is a CUDA graph (:mod:`~typedlm.runner.graphs`); on the CPU the step runs eagerly at exact sizes.
* a prefill of at most 128 new tokens a row, up to 4 rows (a prompt's tail after its cached prefix), replays
  CUDA graphs too, one a row (:mod:`~typedlm.runner.short_prefill`: eagerly it is bound by kernel launches).
* other prefills and ``extend`` (several tokens per row: forced tokens, jump-forward drafts) run eagerly:
  causal SDPA over each row's earlier columns and its own new ones (right-padded; padding writes the
  scratch column).

On CUDA each layer of the graphed step is compiled once (the ``compile_decode`` setting); the whole step
is not compiled. Speed against HF ``generate``: ``typedlm bench gen`` (docs/benchmarks.md).
"""

from __future__ import annotations

import weakref

import torch

from ..errors import TypedLMError
from .compiled import compiled_layer, release_workers
from .graphs import MIN_BUCKET, DecodeGraphs, batch_buckets, bucket, column_buckets
from .layers import DECODE_DIMS, attend, decode_layer, fuse, invariant_decode_layer, project_qkv
from .short_prefill import ShortPrefill
from .static_kv import StaticKV
from .tensors import device_tensor


class StaticForwards:
    """The forwards of one :class:`StaticKV` (``kv``): prefill, decode step, extend, graph capture."""

    def __init__(self, model, kv: StaticKV, *, compile_decode: bool = True, short_prefill: bool = True,
                 release_workers: bool = True):
        """``kv.invariant``: decode steps on the batch-invariant ops (deterministic generation; the caller runs the
        forwards with :func:`typedlm.runner.invariant.mode.enabled` so the eager prefill/extend use them too).
        ``compile_decode``: the CUDA decode layer compiled; ``short_prefill``: short prefills graphed on CUDA;
        ``release_workers``: inductor's compile workers shut down after captures (:func:`.compiled.release_workers`)."""
        # a proxy: the runner maps each StaticKV to its forwards weakly, so the slots' lifetime is the scheduler's
        self.model, self.kv, self.dev, self.invariant = model, weakref.proxy(kv), kv.dev, kv.invariant
        self.capacity, self.max_len, self.k, self.v, self.length = kv.capacity, kv.max_len, kv.k, kv.v, kv.length
        self.base = model.model
        self.layers = list(self.base.layers)
        a = self.layers[0].self_attn
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim, self.scaling, self.qk_norm = a.head_dim, a.scaling, hasattr(a, "q_norm")
        device, capacity = kv.dev, kv.capacity
        self._cols = torch.arange(kv.max_len + 1, device=device)
        self._rows = torch.arange(capacity, device=device)
        self._io = torch.zeros(2, capacity, dtype=torch.long, device=device)  # step inputs: ids, positions
        cuda = device.type == "cuda"
        # step inputs staged on the host, two buffers taken in turn, each with the event of its last copy
        self._host = [torch.zeros(2, capacity, dtype=torch.long, pin_memory=cuda) for _ in range(2)]
        self._copied = [torch.cuda.Event() if cuda else None for _ in range(2)]
        self._turn = 0
        self.eps = float(getattr(cfg, "rms_norm_eps", 1e-6))
        self.weights = [fuse(layer) for layer in self.layers]
        self._layer = invariant_decode_layer if kv.invariant else decode_layer
        self.compile_decode, self.release_workers = compile_decode, release_workers
        if not kv.invariant and cuda and compile_decode:
            # one decoder layer compiled once (inductor fuses norms, rope, softmax, SiLU), shared by every
            # layer and bucket
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
            self._layer = compiled_layer(decode_layer, DECODE_DIMS)
        self.graphs = DecodeGraphs(device, self._decode, self._reset_inputs, self._io,
                                   after_capture=self.release_compile_workers)
        self.short = ShortPrefill(self, enabled=short_prefill)  # short prefills (a cached prompt's tail) as CUDA graphs
        self.mixed = None  # a MixedStep when decisions' chunks ride in decode steps (the runner's mixed_step)

    @property
    def capture_s(self) -> float:
        return self.graphs.capture_s

    # -- forwards ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, slots: list[int], past: torch.Tensor | None = None) -> torch.Tensor:
        """``past`` (a cached prefix's KV ``[layers, 2, kv_heads, m, head_dim]``): copied into every row's slot
        first; ``ids`` are then the tokens after it."""
        g, t = ids.shape
        m = 0 if past is None else int(past.shape[3])
        if m + t > self.max_len:
            raise TypedLMError(f"prompt of {m + t} tokens is longer than the static KV ({self.max_len}; TYPEDLM_KV_LEN)")
        with self.kv.lock:
            for s in slots:
                self.length[s] = 0
                if m:
                    self.kv.put(s, past)
            if self.short.fits(g, t):  # a graph per row: still far cheaper than the eager forward
                return torch.cat([self.short.run(ids[i], s, m) for i, s in enumerate(slots)])
            return self._extend(ids, slots, [t] * g)

    @torch.inference_mode()
    def step(self, tokens: list[int] | torch.Tensor, slots: list[int], ride=None) -> torch.Tensor:
        """``tokens``: host ids, or the ids on the device (``device_feed``: the sampler's output, queued before the
        host has read it, so the forward runs while the host handles the previous step). ``ride``: a decision's
        chunk (:class:`~.score_graph.Ride`) for the same forward (:mod:`.mixed`, when on and it fits)."""
        with self.kv.lock:
            longest = self.kv.check(max(self.length[s] for s in slots) + 1)
            top = max(slots) + 1
            if self.dev.type == "cuda":
                b = bucket(top, self.capacity)
                cols = min(max(MIN_BUCKET, bucket(longest, 1 << 30)), self.max_len)
            else:  # eager on the CPU: exact sizes, no padding
                b, cols = top, longest
            # with device feeds the host runs a step ahead: the copy of the previous step's inputs may still be
            # queued, so the other buffer is staged, once its own last copy is done (at once, in practice)
            self._turn ^= 1
            host, copied = self._host[self._turn], self._copied[self._turn]
            if copied is not None:
                copied.synchronize()
            host[0, :b] = 0
            host[1, :b] = self.max_len  # rows not in this call write the scratch column
            on_device = isinstance(tokens, torch.Tensor)
            for i, s in enumerate(slots):
                if not on_device:
                    host[0, s] = tokens[i]
                host[1, s] = self.length[s]
                self.length[s] += 1
            self._io[:, :b].copy_(host[:, :b], non_blocking=True)
            if copied is not None:
                copied.record()
            contiguous = slots == list(range(len(slots)))
            if on_device:
                if contiguous:
                    self._io[0, : len(slots)].copy_(tokens)
                else:
                    self._io[0].index_copy_(0, device_tensor(slots, self.dev), tokens)
            if ride is not None and self.mixed is not None and self.mixed.fits(ride):
                out = self.mixed.step(b, cols, ride)
            else:
                out = self.graphs.replay(b, cols) if self.dev.type == "cuda" else self._decode(b, cols)
            if contiguous:
                return out[: len(slots)].clone()  # a copy: the next replay overwrites ``out``
            return out[device_tensor(slots, self.dev)]

    @torch.inference_mode()
    def extend(self, tokens: list[list[int]], slots: list[int], every: bool = False) -> torch.Tensor:
        with self.kv.lock:
            self.kv.check(max(self.length[s] + len(t) for s, t in zip(slots, tokens)))
            k = max(len(t) for t in tokens)
            ids = torch.tensor([t + [0] * (k - len(t)) for t in tokens], dtype=torch.long)
            return self._extend(ids.to(self.dev), slots, [len(t) for t in tokens], every)

    def capture(self, max_tokens: int | None = None, batches: list[int] | None = None) -> float:
        """Capture every (batch, length) bucket up to ``max_tokens`` columns (default: all); seconds."""
        if self.dev.type != "cuda":
            return 0.0
        before = self.graphs.capture_s
        top = min(self.max_len, max_tokens or self.max_len)
        bs = [b for b in batch_buckets(self.capacity) if batches is None or b in batches]
        with self.kv.lock, torch.inference_mode():
            self.graphs.capture(bs, column_buckets(top, self.max_len))
            self.short.capture(top)
        self.release_compile_workers()
        return self.graphs.capture_s - before

    def release_compile_workers(self) -> bool:
        """The compile workers shut down once the graphs that compile are captured (when ``release_workers``)."""
        return release_workers(self.release_workers)

    # -- the model ----------------------------------------------------------------------------------
    def _extend(self, ids: torch.Tensor, slots: list[int], lens: list[int], every: bool = False) -> torch.Tensor:
        """Eager forward of ``ids`` ([n, k], row i's first ``lens[i]`` real, the rest padding) at
        positions ``length[slot]`` on; K/V go into each row's slot (padding into the scratch column);
        attention covers each row's earlier columns and its own new ones causally. Returns float32
        logits after each row's last real token (``every``: after every position); advances ``length``."""
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
            q, kk, v = project_qkv(a, layer.input_layernorm(h), cos, sin, self.head_dim, self.qk_norm)
            if fresh:
                self.k[i][slot_t, :, :k] = kk
                self.v[i][slot_t, :, :k] = v
                o = attend(q, kk, v, None, self.scaling)
            else:
                self.k[i][slot_t.view(n, 1), :, write] = kk.transpose(1, 2)
                self.v[i][slot_t.view(n, 1), :, write] = v.transpose(1, 2)
                o = attend(q, self.k[i][slot_t, :, :width], self.v[i][slot_t, :, :width], visible, self.scaling)
            h = h + a.o_proj(o.reshape(n, k, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        for s, x in zip(slots, lens):
            self.length[s] += x
        if every:
            return self.model.lm_head(self.base.norm(h)).float()
        last = h[:, -1] if fresh else h[torch.arange(n, device=self.dev), device_tensor(lens, self.dev) - 1]
        return self.model.lm_head(self.base.norm(last)).float()

    def _reset_inputs(self, b: int) -> None:
        self._io[0, :b] = 0
        self._io[1, :b] = self.max_len

    def _decode(self, b: int, cols: int) -> torch.Tensor:
        """One token per row of slots ``[0, b)`` from the input buffers (the graphs' body)."""
        ids, pos = self._io[0, :b].view(b, 1), self._io[1, :b].view(b, 1)
        rows = self._rows[:b]
        h = self.base.embed_tokens(ids)
        cos, sin = self.base.rotary_emb(h, pos)
        visible = self._cols[:cols].view(1, 1, 1, cols) <= pos.view(b, 1, 1, 1)  # [b, 1, 1, cols]
        for i, w in enumerate(self.weights):
            h = self._layer(h, cos, sin, visible, rows, pos[:, 0], self.k[i], self.v[i], *w,
                            self.eps, self.scaling, self.heads, self.kv_heads, self.head_dim)
        return self.model.lm_head(self.base.norm(h[:, 0])).float()
