"""BatchKV: the running decode batch's KV cache, rows of different lengths left-padded into one.

Layout (per layer, the transformers ``DynamicCache`` tensors): ``[B, heads, T, head_dim]`` where
``T`` is the longest row. Row ``i`` occupies the last ``len_i`` columns; the columns before are
zeros that ``mask[i]`` (``[B, T]``, 1 = real token) hides from attention. Each row keeps its own
next position id, so RoPE sees the positions a single-row run would see.

  ``add(cache, length)``  merge rows prefilled without padding (same length) into the batch
  ``step(tokens)``        one batched forward of each row's new tokens -> logits ``[B, V]``
  ``truncate(drop)``      forget each row's last tokens (masked columns; rejected jump-forward drafts)
  ``keep(indices)``       evict every other row (index_select), then drop all-padding columns

A prefill alone + a left-padded, masked decode gives the same logits as a single-row run (up to
float summation order), so greedy batched output equals single-row output (pinned by a test).
"""

from __future__ import annotations

import torch

from ..engine import Engine
from ..errors import TypedLMError


class BatchKV:
    """For model families :class:`~typedlm.generate.kv.StaticKV` does not run. Slots only number
    the rows for the sampler's per-row buffers; the KV itself is in running order."""

    def __init__(self, engine: Engine, capacity: int):
        self.engine, self.capacity = engine, capacity
        self._free = list(range(capacity))
        self.max_len = engine.max_context
        self.cache = None  # transformers DynamicCache, or None while the batch is empty
        self.mask = torch.zeros(0, 0, dtype=torch.long, device=engine.device)
        self.positions = torch.zeros(0, dtype=torch.long, device=engine.device)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def acquire(self) -> int:
        self._free.sort()
        return self._free.pop(0)

    def release(self, slot: int) -> None:
        self._free.append(slot)

    def capture(self, max_tokens: int | None = None) -> float:
        """Nothing to capture: dynamic shapes."""
        return 0.0

    def prefill(self, ids: torch.Tensor, slots: list[int]) -> torch.Tensor:
        """Rows of one length, prefilled together without padding, merged into the batch."""
        kw = {"logits_to_keep": 1} if self.engine.keeps_logits else {}
        logits, cache = self.engine.forward(ids, **kw)
        last = logits[:, -1].float()
        self.add(cache, int(ids.shape[1]))
        return last

    @property
    def size(self) -> int:
        return int(self.positions.shape[0])

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def add(self, cache, length: int) -> None:
        """Append the rows of a cache prefilled without padding (``length`` real tokens per row)."""
        layers = _layers(cache)
        dev = self.engine.device
        rows = int(layers[0].keys.shape[0])
        if self.cache is None:
            self.cache = cache
            self.mask = torch.ones(rows, length, dtype=torch.long, device=dev)
            self.positions = torch.full((rows,), length, dtype=torch.long, device=dev)
            return
        width = max(self.width, length)
        mine = _layers(self.cache)
        for own, new in zip(mine, layers):
            own.keys = torch.cat([_left_pad(own.keys, width), _left_pad(new.keys, width)], dim=0)
            own.values = torch.cat([_left_pad(own.values, width), _left_pad(new.values, width)], dim=0)
        row_mask = torch.ones(rows, length, dtype=torch.long, device=dev)
        self.mask = torch.cat([_left_pad(self.mask, width, dim=1), _left_pad(row_mask, width, dim=1)], dim=0)
        self.positions = torch.cat([self.positions, torch.full((rows,), length, dtype=torch.long, device=dev)])

    def step(self, tokens: list[list[int]], slots: list[int] | None = None, every: bool = False) -> torch.Tensor:
        """Feed each row its tokens (in row order, at least one each); returns the float32 logits
        ``[B, V]`` after each row's last token (``every``: ``[B, k, V]`` after each fed position,
        row i's real ones first). Rows given fewer tokens than the longest are right-padded; the
        padding columns stay masked (0) for the rest of the row's life."""
        dev = self.engine.device
        k = max(len(t) for t in tokens)
        lens = torch.tensor([len(t) for t in tokens], dtype=torch.long, device=dev)
        ids = torch.tensor([t + [0] * (k - len(t)) for t in tokens], dtype=torch.long, device=dev)
        cols = torch.arange(k, device=dev)
        new = (cols.view(1, -1) < lens.view(-1, 1)).long()
        self.mask = torch.cat([self.mask, new], dim=1)
        logits, cache = self.engine.forward(ids, self.cache, attention_mask=self.mask,
                                            position_ids=self.positions.view(-1, 1) + cols.view(1, -1))
        self.cache = cache
        self.positions = self.positions + lens
        if every:
            return logits.float()
        if k == 1:
            return logits[:, -1].float()
        return logits[torch.arange(len(tokens), device=dev), lens - 1].float()

    def truncate(self, drop: list[int], slots: list[int] | None = None) -> None:
        """Forget the last ``drop[i]`` tokens of row i (rejected jump-forward drafts): their columns
        are masked for good and the row's next position moves back."""
        for i, n in enumerate(drop):
            if n:
                cols = self.mask[i].nonzero()[-n:, 0]
                self.mask[i, cols] = 0
                self.positions[i] -= n

    def keep(self, indices: list[int]) -> None:
        """Keep only these rows (in this order); free the rest and any all-padding leading columns."""
        if not indices:
            self.cache = None
            self.mask = self.mask[:0, :0]
            self.positions = self.positions[:0]
            return
        if indices == list(range(self.size)):
            return
        idx = torch.tensor(indices, dtype=torch.long, device=self.engine.device)
        mask = self.mask.index_select(0, idx)
        real = mask.any(dim=0).nonzero()
        start = int(real[0]) if real.numel() else mask.shape[1]
        for layer in _layers(self.cache):
            layer.keys = layer.keys.index_select(0, idx)[:, :, start:]
            layer.values = layer.values.index_select(0, idx)[:, :, start:]
        self.mask = mask[:, start:]
        self.positions = self.positions.index_select(0, idx)


def _layers(cache) -> list:
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if layers is None or any(type(layer) is not DynamicLayer for layer in layers):
        raise TypedLMError("continuous batching needs a plain transformers DynamicCache "
                           "(sliding-window, static and linear-attention caches are not supported yet)")
    return layers


def _left_pad(t: torch.Tensor, width: int, dim: int = 2) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)
