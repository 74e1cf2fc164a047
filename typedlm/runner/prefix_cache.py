"""Prefix cache: token prefix -> KV, kept across requests; generation and decisions share it (torch runner).

* **Blocks.** A prompt's KV is kept in blocks of :data:`BLOCK` tokens, each one tensor ``[layers, 2,
  kv_heads, BLOCK, head_dim]`` at the model's dtype on its device. A block is keyed by (its parent block,
  its token tuple): a block's KV is that of its tokens after exactly its ancestors' tokens, so the blocks
  form a radix tree with fixed-size edges (vLLM's hashed blocks, with the tokens themselves as the key: no
  hash collision can return another prompt's KV). A lookup walks the prompt block by block; only whole
  blocks match.
* **Rows get copies.** A hit concatenates the matched blocks into a new tensor that the row's cache takes
  (the static KV copies it into the row's slot; decisions build a transformers cache on it). A block is
  never written after it is stored and no row reads a block in place, so eviction can never change the KV
  of a running row (there is nothing to pin).
* **Bounded by bytes** (``limit_bytes``; 0 = off): storing evicts least-recently-used leaf blocks first
  (a lookup touches a path child-first, so a parent is always fresher than its children and leaves go
  first); a prompt whose blocks do not fit is stored as far as they fit.
* **Invalidated** when the weights change: ``stamp()`` (the runner's: every parameter's storage and
  version counter) is compared on each lookup and a different one empties the cache. A new model is a new
  runner, with its own cache.
* **Thread-safe**: one lock around the tree; the copies a hit returns are the caller's.

``tally()`` collects, for the calling context, every lookup's (query ids, tokens reused): decisions
report ``usage.cached_prompt_tokens`` from it without the scoring code passing counts around.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
from dataclasses import dataclass
import threading
from typing import Callable

import torch
from transformers import DynamicCache

from ..errors import TypedLMError
from .invariant.mode import active as invariant_active

BLOCK = 16  # tokens per block
GB = 1 << 30
_TALLY: contextvars.ContextVar[tuple] = contextvars.ContextVar("typedlm_prefix_tally", default=())


def default_limit(device: torch.device, gb: float | None = None) -> int:
    """Bytes for the cache: ``gb`` (the ``prefix_cache_gb`` setting) when set, else 10 % of a GPU's memory (at
    most 16 GB), 1 GB on the CPU."""
    if gb is not None:
        return gb_to_bytes(gb)
    if device.type == "cuda":
        return min(16 * GB, torch.cuda.get_device_properties(device).total_memory // 10)
    return GB


def gb_to_bytes(gb: float) -> int:
    if gb < 0:
        raise TypedLMError(f"prefix cache size must be >= 0 GB, got {gb}")
    return int(gb * GB)


@dataclass(eq=False)
class Block:
    parent: "Block | None"
    tokens: tuple
    kv: torch.Tensor  # [layers, 2, kv_heads, BLOCK, head_dim]
    children: int = 0

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


@dataclass
class PrefixStats:
    hits: int = 0  # lookups that reused at least one block
    misses: int = 0
    cached_tokens: int = 0  # tokens read from the cache instead of computed
    evictions: int = 0  # blocks evicted
    bytes: int = 0  # bytes held
    blocks: int = 0


@dataclass(frozen=True)
class Match:
    """A lookup's result: ``length`` tokens matched (whole blocks), ending in ``block`` (None: no hit)."""
    length: int
    block: Block | None

    def kv(self) -> torch.Tensor | None:
        """The matched prefix's KV ``[layers, 2, kv_heads, length, head_dim]``: a new tensor, the caller's."""
        if self.block is None:
            return None
        chain, b = [], self.block
        while b is not None:
            chain.append(b.kv)
            b = b.parent
        return torch.cat(chain[::-1], dim=3)


MISS = Match(0, None)


def _root():
    """The tree a first block hangs from: KV computed with batch-invariant ops (decisions) and with the fast
    kernels (generation) differ in the last bits, so they are kept apart (a decision's result never depends on
    whether a chat came first)."""
    return "invariant" if invariant_active() else 0


class PrefixCache:
    def __init__(self, limit_bytes: int, stamp: Callable[[], object] | None = None, block: int = BLOCK):
        self.limit_bytes, self.block = int(limit_bytes), block
        self._stamp_fn = stamp
        self._stamp = stamp() if stamp else None
        self._blocks: dict[tuple, Block] = {}  # (id of parent or 0, tokens) -> block
        self._lru: collections.OrderedDict[int, tuple] = collections.OrderedDict()  # id(block) -> key
        self.stats = PrefixStats()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    def set_limit(self, limit_bytes: int) -> None:
        """A new bound (0 turns the cache off and empties it); evicts down to it."""
        with self._lock:
            self.limit_bytes = int(limit_bytes)
            if not self.enabled:
                self._empty()
            self._evict_to(self.limit_bytes, keep=())

    def clear(self) -> None:
        with self._lock:
            self._empty()

    def _empty(self) -> None:
        self._blocks.clear()
        self._lru.clear()
        self.stats.bytes = self.stats.blocks = 0

    # -- lookup ---------------------------------------------------------------------------------------
    def match(self, ids: list[int], limit: int | None = None) -> Match:
        """The longest cached prefix of ``ids`` in whole blocks, at most ``limit`` tokens (default: all).
        Counted as a hit or a miss, and in the calling context's :func:`tally`."""
        if not self.enabled:
            return MISS
        limit = len(ids) if limit is None else min(limit, len(ids))
        with self._lock:
            self._check_stamp()
            path = self._walk(ids, limit)
            for b in reversed(path):  # child first: parents end up fresher than their children
                self._lru.move_to_end(id(b))
            got = Match(len(path) * self.block, path[-1] if path else None)
            if path:
                self.stats.hits += 1
                self.stats.cached_tokens += got.length
            else:
                self.stats.misses += 1
        for seen in _TALLY.get():
            seen.append((ids, got.length))
        return got

    def peek(self, ids: list[int]) -> int:
        """Tokens of ``ids`` a lookup would read from the cache now (whole blocks); counts nothing, touches no
        block (a caller choosing how to compute a prompt)."""
        if not self.enabled:
            return 0
        with self._lock:
            self._check_stamp()
            return len(self._walk(ids, len(ids))) * self.block

    def _walk(self, ids: list[int], limit: int, after: Match = MISS) -> list[Block]:
        """The cached blocks of ``ids[:limit]``; ``after`` (a match of a prefix of ``ids``, still held): the walk
        resumes past it (its blocks are followed by their parent links, no token tuple hashed)."""
        path = self._chain(after.block)[: limit // self.block] if self._held(after.block) else []
        parent = path[-1] if path else None
        for a in range(len(path) * self.block, limit - self.block + 1, self.block):
            b = self._blocks.get((id(parent) if parent else _root(), tuple(ids[a:a + self.block])))
            if b is None:
                break
            path.append(b)
            parent = b
        return path

    def _held(self, b: Block | None) -> bool:
        """Is ``b`` still in the cache? (its ancestors then are too: a block with children is never evicted)"""
        return b is not None and self._blocks.get(self._lru.get(id(b))) is b

    @staticmethod
    def _chain(b: Block | None) -> list[Block]:
        chain = []
        while b is not None:
            chain.append(b)
            b = b.parent
        return chain[::-1]

    # -- store ----------------------------------------------------------------------------------------
    def insert(self, ids: list[int], read: Callable[[int, int], torch.Tensor], upto: int | None = None,
               after: Match = MISS) -> int:
        """Store the whole blocks of ``ids[:upto]`` not held yet; ``read(a, b)`` gives the KV of tokens
        ``[a, b)`` (``[layers, 2, kv_heads, b - a, head_dim]``), called once for the missing range.
        ``after``: this prompt's own lookup, so its matched blocks are not walked again.
        Returns the number of blocks added."""
        if not self.enabled:
            return 0
        n = len(ids) if upto is None else min(upto, len(ids))
        n -= n % self.block
        with self._lock:  # no weights check here: the lookup before it made one, and KV computed before a change
            path = self._walk(ids, n, after)  # is dropped by the next lookup (checking here could keep it under the new stamp)
        start = len(path) * self.block
        if start >= n:
            return 0
        kv = read(start, n)  # read outside the lock: a device copy
        parts = kv.split(self.block, dim=3)
        added = 0
        with self._lock:
            if path and not self._held(path[-1]):  # evicted meanwhile (a block is dropped only once childless)
                return 0
            parent = path[-1] if path else None
            chain = list(path)
            keep = set(map(id, path))
            for i, part in enumerate(parts):
                a = start + i * self.block
                key = (id(parent) if parent else _root(), tuple(ids[a:a + self.block]))
                b = self._blocks.get(key)
                if b is None:
                    b = Block(parent, key[1], part.clone())
                    if not self._evict_to(self.limit_bytes - b.nbytes, keep):
                        break
                    self._blocks[key] = b
                    self._lru[id(b)] = key
                    if parent is not None:
                        parent.children += 1
                    self.stats.bytes += b.nbytes
                    self.stats.blocks += 1
                    added += 1
                keep.add(id(b))
                chain.append(b)
                parent = b
            for b in reversed(chain):
                if id(b) in self._lru:
                    self._lru.move_to_end(id(b))
        return added

    def _evict_to(self, target: int, keep) -> bool:
        """Evict least-recently-used leaves (never one in ``keep``) until at most ``target`` bytes are
        held; False when that is impossible."""
        if target < 0:
            return False
        for b_id in list(self._lru):
            if self.stats.bytes <= target:
                break
            b = self._blocks[self._lru[b_id]]
            if b.children or b_id in keep:
                continue
            self._drop(b_id)
        return self.stats.bytes <= target

    def _drop(self, b_id: int) -> None:
        b = self._blocks.pop(self._lru.pop(b_id))
        if b.parent is not None:
            b.parent.children -= 1
        self.stats.bytes -= b.nbytes
        self.stats.blocks -= 1
        self.stats.evictions += 1

    def _check_stamp(self) -> None:
        if self._stamp_fn is None:
            return
        now = self._stamp_fn()
        if now != self._stamp:
            self._stamp = now
            self._empty()


@contextlib.contextmanager
def tally():
    """Collect ``(ids, tokens reused)`` of every lookup made in this context (see the module docstring);
    tallies nest (an outer one sees the lookups of an inner one too)."""
    seen: list = []
    token = _TALLY.set((*_TALLY.get(), seen))
    try:
        yield seen
    finally:
        _TALLY.reset(token)


def reused_by(prompt: list[int], seen: list) -> int:
    """Tokens of ``prompt`` read from the cache by the lookups in ``seen``: the most any lookup whose
    query is a prefix of ``prompt`` reused."""
    return max((m for ids, m in seen if m and len(ids) <= len(prompt) and prompt[:len(ids)] == list(ids)),
               default=0)


# -- KV layout helpers (transformers caches <-> blocks) ----------------------------------------------------
def from_hf(cache, row: int, a: int, b: int) -> torch.Tensor:
    """Tokens ``[a, b)`` of batch row ``row`` of a transformers cache -> ``[layers, 2, kv_heads, b - a, d]``."""
    return torch.stack([torch.stack((lay.keys[row, :, a:b], lay.values[row, :, a:b])) for lay in cache.layers])


def to_hf(kv: torch.Tensor, batch: int = 1, copy: bool = True):
    """A prefix's KV ``[layers, 2, kv_heads, n, d]`` -> a transformers DynamicCache of ``batch`` rows. ``copy=False``:
    its layers are views of ``kv`` (a tensor the caller gives away; the cache's updates are out of place, as
    :func:`truncate` assumes): no copy kernel per layer (56 for a 28-layer model) queued before a decision's read."""
    layers = [(layer[0][None].expand(batch, -1, -1, -1), layer[1][None].expand(batch, -1, -1, -1)) for layer in kv]
    if copy:
        return DynamicCache(ddp_cache_data=layers)
    return _view_cache(layers, int(kv.shape[3]))


def _view_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], length: int):
    """A DynamicCache whose layers hold ``layers``' tensors as they are (:func:`_made_layers`; else emptied layers
    given the tensors)."""
    cache = _made_layers(layers, length)
    if cache is not None:
        return cache
    cache = DynamicCache(ddp_cache_data=[(k[..., :0, :], v[..., :0, :]) for k, v in layers])  # empty: nothing copied
    for lay, (k, v) in zip(cache.layers, layers):
        lay.keys, lay.values = k, v
    return cache


def _made_layers(layers: list[tuple[torch.Tensor, torch.Tensor]], length: int):
    """The cache with its layers made as its own first update would make them, without the update: filling a cache
    through ``update`` queues two empty allocations and two concatenations a layer (224 host-side torch calls for a
    28-layer model, ~2 ms of a later decision). None where this transformers version's layers differ."""
    try:
        cache = DynamicCache()
        lay_cls = getattr(cache, "layer_class_to_replicate", None)
        if lay_cls is None or cache.layers:
            return None
        for k, v in layers:
            lay = lay_cls()
            lay.keys, lay.values, lay.is_initialized = k, v, True
            lay.dtype, lay.device = k.dtype, k.device
            cache.layers.append(lay)
    except (TypeError, AttributeError):
        return None
    return cache if cache.get_seq_length() == length and len(cache) == len(layers) else None


def configure(engine, gb: float | None):
    """Set the engine's prefix cache to ``gb`` (None: keep the default; 0: off) -> the engine. A backend
    without a prefix cache (MLX) accepts only None or 0."""
    cache = engine.runner.prefix_cache
    if gb is not None and cache is None and gb > 0:
        raise TypedLMError(f"the {engine.runner.backend} backend has no prefix cache (--prefix-cache-gb 0)")
    if gb is not None and cache is not None:
        cache.set_limit(gb_to_bytes(gb))
    return engine
