"""ModelRunner: the one place a model runs, under both generation and decisions (torch backend).

What it runs:
  * **decode** — ``decode_cache(max_batch)`` hands a scheduler a :class:`~typedlm.runner.contract.SlotBook`
    (the engine's shared :class:`StaticKV` for Llama / Qwen2 / Qwen3, else a :class:`DynamicKV` of its
    own); ``prefill`` / ``run`` / ``capture`` run prompts, decode steps (one token per row: CUDA graphs),
    and multi-token extends (forced tokens, jump-forward drafts) on it (the server's warm-up is a throw-away
    generation through the scheduler, then ``capture``); ``step_ids`` takes a step's ids as a device tensor
    (the scheduler's device feed: no host sync between steps).
  * **scoring** (decisions) — ``prefill_prefix`` / ``prefill_prefixes`` give prefix caches;
    ``score`` runs one pass of tokens on a prefix with per-token positions and an allowed-attention
    matrix and returns the logits at the positions asked for; ``score_expand`` runs rows as a batch
    on a broadcast prefix. A prefix cache is opaque to callers: the runner cuts it back after each pass.
  * ``forward`` — the raw model call (``(logits, cache)``); the only place that knows the model's
    KV-cache keyword. ``wrapped(fn)`` gives a view whose forwards go through ``fn`` (tests that count
    or fail forwards). ``prompt_prefill`` is ``prefill_prefix`` as a job a scheduler cuts into chunks.

Contract for a second backend (MLX): the same methods with the same shapes; logits float32 ``[.., V]``
(``V`` the lm_head rows); caches owned by the runner; a scheduler's decode calls come from one thread,
and scoring may run on another thread beside them (the model is read-only; the decision's prefix cache is
its own). See ``docs/ARCHITECTURE.md`` ("Runner").
"""

from __future__ import annotations

import copy
import inspect
import threading
import weakref
from typing import Callable

import torch
from transformers import DynamicCache

from ..config import Settings
from ..errors import TypedLMError
from .contract import Capabilities, SlotBook
from .dynamic_kv import DynamicKV
from .invariant import mode as invariant
from .prefix_cache import PrefixCache, default_limit, to_hf
from .prefix_reuse import PromptPrefill, WeightsStamp, cached_pass, prefill_prompts, prefill_rows, store_pass
from .mixed import MixedStep
from .score_graph import Ride, ScoreGraphs
from .static_forwards import StaticForwards
from .static_kv import StaticKV, unsupported
from .graphs import batch_buckets, column_buckets
from .tensors import device_tensor, to_device


class ModelRunner:
    backend = "torch"

    def __init__(self, model, *, device: torch.device, dtype: torch.dtype, max_context: int, settings: Settings,
                 placed: bool = False):
        self.model, self.device, self.dtype, self.max_context = model, device, dtype, max_context
        self.settings = settings
        params = inspect.signature(model.forward).parameters
        self.cache_kwarg = "cache" if "cache" in params else "past_key_values"  # transformers 5.x vs 4.x
        self.keeps_logits = "logits_to_keep" in params  # lm_head only at the positions read
        self.static_reason = unsupported(model, placed)  # None: StaticKV runs this model
        self.kv_len = min(max_context, settings.kv_len)
        self._static: StaticKV | None = None
        self._forwards: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # StaticKV -> its StaticForwards
        self._lock = threading.Lock()
        # token prefix -> KV across requests, for prefill and decisions (runner/prefix_reuse.py)
        self.prefix_cache = PrefixCache(default_limit(device, settings.prefix_cache_gb), stamp=WeightsStamp(model))
        # a decision's invariant pass on a cached prefix as a CUDA graph (runner/score_graph.py)
        self.score_graphs = ScoreGraphs(model, device=device, dtype=dtype, max_len=self.kv_len, settings=settings) \
            if self.static_reason is None else None
        # what never changes for this model, worked out once (``capabilities`` is read per decision)
        self._fixed = dict(backend="torch", cuda_graphs=self.static_reason is None and device.type == "cuda",
                           deterministic=invariant.unsupported(model) is None, device_feed=self.static_reason is None)
        self._caps: Capabilities | None = None
        self.invariant_reason: str | None = None  # None: scoring is batch-invariant; else why not
        self.deterministic = False  # generation on the batch-invariant ops too (set_deterministic)
        on = settings.batch_invariant
        if on is False or (on is None and device.type != "cuda"):
            self.invariant_reason = "TYPEDLM_BATCH_INVARIANT=0" if on is False else "off by default on the CPU"
        else:
            self.set_invariant(True)

    def set_invariant(self, on: bool) -> bool:
        """Batch-invariant scoring on or off (benches measure both; ``load_engine(deterministic=)``,
        ``--deterministic``). Batched = one row, bit for bit (CPU fp32; CUDA bf16 with the Triton kernels). Default
        on CUDA, where decide without rescoring is faster than with it (``typedlm bench decide``);
        off on the CPU, where the pure-torch attention loop makes a decision ~14x slower than near-tie rescoring
        does; ``TYPEDLM_BATCH_INVARIANT=1/0`` forces it on/off. Returns whether it is on: a model the hooks cannot take stays
        off, with the reason."""
        self.invariant_reason = invariant.install(self.model) if on else "switched off"
        return self.invariant

    def set_deterministic(self, on: bool) -> bool:
        """Batch-invariant scoring *and* generation (greedy rows give the same bits whatever shares the batch, slot
        reuse included; decode steps without ``torch.compile``), or neither. Set before schedulers start: the
        static KV is rebuilt for it. Returns whether it is on."""
        self.deterministic = self.set_invariant(on) and on
        return self.deterministic

    @property
    def invariant(self) -> bool:
        """Scoring passes are batch-invariant: a row's logits are the same bits whatever shares its pass."""
        return self.invariant_reason is None

    @property
    def capabilities(self) -> Capabilities:
        """The declared capabilities: the model's fixed ones, worked out at construction, with the two that
        switch at run time (batch-invariant scoring, the prefix cache's limit) read now; the object is remade
        only when one of those two has changed."""
        caps, on, cached = self._caps, self.invariant, self.prefix_cache.enabled
        if caps is None or caps.invariant != on or caps.prefix_cache != cached:
            caps = self._caps = Capabilities(invariant=on, prefix_cache=cached, **self._fixed)
        return caps

    # -- the model call -------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, cache=None, **kwargs):
        """One model call -> (logits [B, T, V], cache)."""
        kwargs[self.cache_kwarg] = cache
        out = self.model(input_ids=input_ids, use_cache=True, **kwargs)
        return out.logits, getattr(out, "cache", None) if self.cache_kwarg == "cache" else out.past_key_values

    def wrapped(self, wrap: Callable) -> "ModelRunner":
        """A view of this runner whose forwards call ``wrap(input_ids, cache, **kwargs)`` instead (for
        scoring: decode caches are made by the runner itself, never by a view)."""
        view = copy.copy(self)
        view.forward = wrap
        view.score_graphs = None  # every scoring pass goes through ``wrap``, none through a graph
        return view

    def weight_samples(self, n: int):
        """(name, shape, first ``n`` values as float32 numpy) of every weight (a model fingerprint)."""
        for name, p in self.model.state_dict().items():
            yield name, tuple(p.shape), p.detach().reshape(-1)[:n].float().cpu().numpy()

    def sync(self) -> None:
        """Wait for queued device work (timings on CUDA); a no-op on the CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- decode -----------------------------------------------------------------------------------------
    def decode_cache(self, max_batch: int, *, dynamic: bool = False) -> SlotBook:
        """The KV cache for a scheduler of ``max_batch`` rows: the engine's shared static slots (grown when
        idle; a smaller one is replaced, not freed, so a scheduler made earlier keeps decoding on it), or a
        dynamic cache of its own (always for a model the static path does not run; ``dynamic``: also for one
        it does — tests and benchmarks compare the two)."""
        if dynamic or self.static_reason is not None:
            return DynamicKV(self.forward, device=self.device, capacity=max_batch, max_len=self.max_context,
                             keeps_logits=self.keeps_logits)
        with self._lock:
            kv = self._static
            if kv is None or ((kv.capacity < max_batch or kv.invariant != self.deterministic) and kv.idle):
                cfg, layer = self.model.config, self.model.model.layers[0].self_attn
                kv = StaticKV(layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads, head_dim=layer.head_dim,
                              device=self.device, dtype=self.dtype, invariant=self.deterministic,
                              capacity=max(max_batch, kv.capacity if kv else 1), max_len=self.kv_len)
                fw = self._forwards[kv] = StaticForwards(self.model, kv, compile_decode=self.settings.compile_decode,
                                                         short_prefill=self.settings.short_prefill,
                                                         release_workers=self.settings.release_compile_workers)
                if self.settings.mixed_step and self.score_graphs is not None:
                    fw.mixed = MixedStep(fw, self.score_graphs)
                self._static = kv
            elif kv.capacity < max_batch:
                raise TypedLMError(f"the engine's static KV holds {kv.capacity} rows and is in use; "
                                   f"a scheduler of {max_batch} rows cannot start now")
            return kv

    @property
    def static_kv(self) -> StaticKV | None:
        return self._static

    def forwards(self, kv: SlotBook):
        """What runs the model on ``kv``: the static slots' :class:`StaticForwards` (the slots themselves only
        keep books), or the dynamic cache itself (its layout is the transformers cache it feeds)."""
        return self._forwards[kv] if isinstance(kv, StaticKV) else kv

    def prefill(self, kv: SlotBook, prompts: list[list[int]], slots: list[int]) -> torch.Tensor:
        """Prompts of one length into fresh slots -> float32 logits ``[g, V]`` of their last token; each row
        starts from its cached prefix (``kv.cached_tokens(slot)`` tokens) and stores its new blocks."""
        with invariant.enabled(self.deterministic):
            return prefill_rows(self.prefix_cache, kv, self.forwards(kv), prompts, slots, self.device)

    def run(self, kv: SlotBook, feeds: list[list[int]], slots: list[int], every: bool = False,
            ride: Ride | None = None) -> torch.Tensor:
        """Each row's new tokens into its slot -> float32 logits ``[n, V]`` after each row's last token, or
        ``[n, k, V]`` after every fed position (``every``: rows verifying a draft). One token per row takes
        the decode step (CUDA graphs); any row with several, the eager extend. ``ride``: a decision's chunk for
        the decode step's forward (``mixed_step``; ``ride.out`` stays None if it did not ride)."""
        fw = self.forwards(kv)
        with invariant.enabled(self.deterministic):
            if every or any(len(f) != 1 for f in feeds):
                return fw.extend(feeds, slots, every)
            return fw.step([f[0] for f in feeds], slots, ride) if ride is not None else \
                fw.step([f[0] for f in feeds], slots)

    def step_ids(self, kv: SlotBook, ids: torch.Tensor, slots: list[int], ride: Ride | None = None) -> torch.Tensor:
        """One token per row given on the device (``[n]`` long: the last sampling's output, not yet read by the
        host) -> float32 logits ``[n, V]``; only for a cache with ``device_feed``. The forward is queued behind
        that sampling, so the host reads the ids while the device runs it (no host sync between steps)."""
        with invariant.enabled(self.deterministic):
            return self.forwards(kv).step(ids, slots, ride) if ride is not None else self.forwards(kv).step(ids, slots)

    def capture(self, kv: SlotBook, max_tokens: int | None = None) -> float:
        """The decode (and short-prefill) graphs of ``kv``'s buckets up to ``max_tokens`` columns; with no bound (the
        server's warm-up) and invariant scoring on CUDA, every score graph too (a decision's chunks beside streams
        replay them: none pays a capture) -> seconds."""
        with invariant.enabled(self.deterministic):
            s = self.forwards(kv).capture(max_tokens)
        graphs = self.score_graphs
        if max_tokens is None and self.invariant and graphs is not None and graphs.enabled and self.device.type == "cuda":
            before = graphs.graphs.capture_s
            with self._scoring(), torch.inference_mode():
                graphs.capture()
                fw = self.forwards(kv)
                if isinstance(kv, StaticKV) and fw.mixed is not None:
                    fw.mixed.capture(batch_buckets(kv.capacity), column_buckets(self.kv_len, self.kv_len))
            s += graphs.graphs.capture_s - before
        return s

    def graph_stats(self, kv: SlotBook) -> tuple[int, float]:
        """(CUDA graphs captured for ``kv``, seconds spent capturing them); none for the dynamic cache."""
        if not isinstance(kv, StaticKV):
            return 0, 0.0
        fw = self._forwards[kv]
        return len(fw.graphs), fw.capture_s

    # -- scoring (decisions) -----------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill_prefix(self, ids: list[int]):
        """A prompt -> its KV cache (no logits needed: rows start with a cue); its cached prefix is read from
        the prefix cache, the rest computed and stored (:meth:`prompt_prefill` run whole)."""
        job = self.prompt_prefill(ids)
        while not job.advance(job.left):
            pass
        return job.result

    def prompt_prefill(self, ids: list[int]) -> PromptPrefill:
        """``prefill_prefix(ids)`` as a job a scheduler may run a chunk at a time."""
        if len(ids) >= self.max_context:
            raise TypedLMError(f"decision prompt has {len(ids)} tokens; the model's context is {self.max_context}")
        return PromptPrefill(self, ids)

    @torch.inference_mode()
    def prefill_prefixes(self, ids_list: list[list[int]]) -> list:
        """Several prompts -> one prefix cache per prompt: each on its cached prefix, those with the same cached
        prefix (none, when the cache is off) in one right-padded forward; stored in the prefix cache."""
        if len(ids_list) == 1:
            return [self.prefill_prefix(ids_list[0])]
        for ids in ids_list:
            if len(ids) >= self.max_context:
                raise TypedLMError(f"decision prompt has {len(ids)} tokens; the model's context is {self.max_context}")
        with self._scoring():
            return prefill_prompts(self, ids_list)

    def cached_prefix(self, ids: list[int]) -> int:
        """Tokens of a decision prompt ``ids`` its scoring would read from the prefix cache now (nothing counted)."""
        with self._scoring():  # the tree the scoring lookups walk (invariant KV is kept apart)
            return self.prefix_cache.peek(ids)

    @torch.inference_mode()
    def score(self, ids: list[int], prefix, positions: list[int], allow: torch.Tensor, read: list[int],
              keep: int | None = None):
        """One pass of ``ids`` after ``prefix`` (a prefix cache, or None: the pass starts at position 0) with
        per-token ``positions`` and ``allow`` (``[Q, K]`` bool: query i may see key j; keys are the prefix's
        then this pass's tokens) -> (logits ``[len(read), V]`` at the pass positions ``read``, the cache cut
        back to ``keep`` tokens: the prefix's length by default; None when ``prefix`` is None and ``keep`` is
        not given). ``keep`` without a prefix: the pass starts with a ``keep``-token prompt (causal, positions
        0..keep-1), read from and stored into the prefix cache; ``allow`` may then leave out the prompt's rows
        (``[Q - keep, K]``: :mod:`.allow`)."""
        with self._scoring():  # the prefix cache's lookups too: invariant KV is kept apart
            return self._score(ids, prefix, positions, allow, read, keep)

    def _score(self, ids, prefix, positions, allow, read, keep):
        dev = self.device
        prompt = ids[:keep] if prefix is None and keep else None
        if prompt is not None:
            past, ids, positions, allow, read = cached_pass(self.prefix_cache, ids, positions, allow, read, keep)
            if self._graphed(0 if past is None else int(past.shape[3]), len(ids)):  # = the eager pass, bit for bit
                logits, kv = self.score_graphs.run(past, ids, positions, allow, read, keep)
                store_pass(self.prefix_cache, prompt, kv)
                return logits, to_hf(kv, copy=False)
            prefix = None if past is None else to_hf(past)
        cut = keep if keep is not None else (prefix_length(prefix) if prefix is not None else None)
        if prefix is not None and self._graphed(prefix_length(prefix), len(ids)):  # a chunk of a pass on its prefix
            logits, kv = self.score_graphs.run(prefix, ids, positions, allow, read, cut)
            return logits, to_hf(kv, copy=False)
        read_t = device_tensor(read, dev)  # pinned staging: a copy from pageable memory would wait for the queue
        try:
            logits, cache = self.forward(device_tensor([ids], dev), prefix, position_ids=device_tensor([positions], dev),
                                         attention_mask=self._additive(allow), **self._keep(read_t))
            logits = logits[0] if self.keeps_logits else logits[0, read_t]
        finally:
            if prefix is not None:
                truncate(prefix, cut)
        if prefix is None and cut is not None:
            truncate(cache, cut)
            prefix = cache
        if prompt is not None:
            store_pass(self.prefix_cache, prompt, prefix)
        return logits, prefix

    def _graphed(self, cached: int, new: int) -> bool:
        """Does a scoring forward of ``new`` tokens after ``cached`` ones go through a score graph (invariant)?"""
        return self.invariant and self.score_graphs is not None and self.score_graphs.fits(cached, new)

    @torch.inference_mode()
    def extend_prefix(self, past, ids: list[int]):
        """A decision prompt's KV ``past`` (None, a transformers cache, or a KV tensor ``[layers, 2, kv_heads, m,
        head_dim]``) continued by ``ids`` (causal, positions ``m`` on) -> the longer KV: a tensor when the chunk
        went through a score graph (invariant scoring on CUDA: one replay, bit-identical to the eager forward),
        else a transformers cache. Each chunk of :class:`~.prefix_reuse.PromptPrefill` is one call."""
        m, n = (0 if past is None else int(past.shape[3]) if isinstance(past, torch.Tensor) else prefix_length(past),
                len(ids))
        with self._scoring():
            if self._graphed(m, n):
                allow = torch.ones(n, m + n, dtype=torch.bool).tril_(m)
                return self.score_graphs.run(past, ids, list(range(m, m + n)), allow, [n - 1], m + n)[1]
            if isinstance(past, torch.Tensor):
                past = to_hf(past, copy=False)
            return self.forward(device_tensor([ids], self.device), past, **self._keep(1))[1]

    @torch.inference_mode()
    def score_expand(self, rows: torch.Tensor, prefix, read: list[int]) -> torch.Tensor:
        """Rows ``[B, L]`` (right-padded) as a batch on a prefix broadcast to the batch -> logits
        ``[B, len(read), V]`` at row positions ``read``."""
        B = rows.shape[0]
        layers = [(lay.keys.expand(B, -1, -1, -1), lay.values.expand(B, -1, -1, -1)) for lay in prefix.layers]
        read_t = device_tensor(read, self.device)
        with self._scoring():
            logits, _ = self.forward(rows.to(self.device), DynamicCache(ddp_cache_data=layers), **self._keep(read_t))
        return logits if self.keeps_logits else logits[:, read_t]

    def _scoring(self):
        """The scoring forwards' context: batch-invariant ops on this thread when available."""
        return invariant.enabled(self.invariant)

    def _keep(self, positions) -> dict:
        return {"logits_to_keep": positions} if self.keeps_logits else {}

    def _additive(self, allow: torch.Tensor) -> torch.Tensor:
        """The bool matrix -> a [1, 1, Q, K] additive mask, built on the device (only the bools travel)."""
        allow = to_device(allow, self.device)
        mask = torch.zeros(allow.shape, dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~allow, torch.finfo(self.dtype).min)[None, None]


def prefix_length(cache) -> int:
    lay = cache.layers[0]
    return int(lay.keys.shape[-2]) if getattr(lay, "keys", None) is not None and lay.keys.numel() else 0


def truncate(cache, length: int) -> None:
    """Put a prefix cache back to exactly ``length`` tokens (after a pass on it, or a failed one)."""
    for lay in cache.layers:
        if getattr(lay, "keys", None) is not None and lay.keys.numel() and lay.keys.shape[-2] > length:
            lay.keys = lay.keys[..., :length, :]
            lay.values = lay.values[..., :length, :]
