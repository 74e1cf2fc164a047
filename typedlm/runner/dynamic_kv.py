"""DynamicKV: the decode cache for model families :class:`~typedlm.runner.static_kv.StaticKV` does not run.

Rows of different lengths are left-padded into one transformers ``DynamicCache``: per layer
``[B, heads, T, head_dim]``, ``T`` the longest row; row ``i`` occupies its last ``len_i`` columns, the
columns before are zeros that ``mask[i]`` (``[B, T]``, 1 = real token) hides from attention. Each row
keeps its own next position id, so RoPE sees the positions a single-row run would see. A prefill alone
+ a left-padded, masked decode gives the same logits as a single-row run (up to float summation order).

Rows are addressed by slot like every :class:`~typedlm.runner.contract.KVCache`; internally they sit in
``order`` (the order they were prefilled). ``release`` only marks a row; the next forward drops the
released rows in one ``index_select`` (and any all-padding leading columns). Every held row steps
together (``partial_steps = False``): a dynamic cache grows by one column for all rows at once.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers.cache_utils import DynamicLayer

from ..errors import TypedLMError
from .prefix_cache import to_hf
from .slots import CompactingSlotCache, SlotPool


class DynamicKV(CompactingSlotCache):
    partial_steps = False
    device_feed = False

    def __init__(self, forward: Callable, *, device: torch.device, capacity: int, max_len: int, keeps_logits: bool):
        self._forward, self.dev, self.capacity, self.max_len = forward, device, capacity, max_len
        self.keeps_logits = keeps_logits
        self.slots = SlotPool(capacity)
        self.order: list[int] = []  # slot of each cache row
        self._gone: set[int] = set()  # released, still in the cache until the next forward
        self.cache = None  # transformers DynamicCache, or None while the batch is empty
        self.mask = torch.zeros(0, 0, dtype=torch.long, device=device)
        self.positions = torch.zeros(0, dtype=torch.long, device=device)

    # -- forwards ---------------------------------------------------------------------------------
    def prefill(self, ids: torch.Tensor, slots: list[int], past: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of one length, prefilled together without padding (on ``past``, a cached prefix's KV
        ``[layers, 2, kv_heads, m, head_dim]`` shared by the rows), then merged into the batch."""
        self._compact()
        kw = {"logits_to_keep": 1} if self.keeps_logits else {}
        logits, cache = self._forward(ids, to_hf(past, len(slots)) if past is not None else None, **kw)
        self._add(cache, int(ids.shape[1]) + (0 if past is None else int(past.shape[3])), slots)
        return logits[:, -1].float()

    def read(self, slot: int, a: int, b: int) -> torch.Tensor:
        """KV of tokens ``[a, b)`` of ``slot`` -> ``[layers, 2, kv_heads, b - a, head_dim]`` (a copy)."""
        self._compact()
        r = self._rows([slot])[0]
        cols = self.mask[r].nonzero()[a:b, 0]
        return torch.stack([torch.stack((lay.keys[r][:, cols], lay.values[r][:, cols])) for lay in _layers(self.cache)])

    def step(self, tokens: list[int], slots: list[int]) -> torch.Tensor:
        return self.extend([[t] for t in tokens], slots)

    def extend(self, tokens: list[list[int]], slots: list[int], every: bool = False) -> torch.Tensor:
        """Rows given fewer tokens than the longest are right-padded; the padding columns stay masked (0)
        for the rest of the row's life."""
        self._compact()
        rows = self._rows(slots)
        if sorted(rows) != list(range(len(self.order))):
            raise TypedLMError("DynamicKV steps every held row together (partial_steps is False)")
        by_row = [None] * len(rows)
        for r, t in zip(rows, tokens):
            by_row[r] = t
        k = max(len(t) for t in by_row)
        lens = torch.tensor([len(t) for t in by_row], dtype=torch.long, device=self.dev)
        ids = torch.tensor([t + [0] * (k - len(t)) for t in by_row], dtype=torch.long, device=self.dev)
        cols = torch.arange(k, device=self.dev)
        self.mask = torch.cat([self.mask, (cols.view(1, -1) < lens.view(-1, 1)).long()], dim=1)
        logits, self.cache = self._forward(ids, self.cache, attention_mask=self.mask,
                                           position_ids=self.positions.view(-1, 1) + cols.view(1, -1))
        self.positions = self.positions + lens
        if every:
            out = logits.float()
        elif k == 1:
            out = logits[:, -1].float()
        else:
            out = logits[torch.arange(len(by_row), device=self.dev), lens - 1].float()
        return out if rows == list(range(len(rows))) else out[torch.tensor(rows, device=self.dev)]

    def truncate(self, drop: list[int], slots: list[int]) -> None:
        """The dropped columns are masked for good and the row's next position moves back."""
        for r, n in zip(self._rows(slots), drop):
            if n:
                cols = self.mask[r].nonzero()[-n:, 0]
                self.mask[r, cols] = 0
                self.positions[r] -= n

    # -- rows ---------------------------------------------------------------------------------------
    def _rows(self, slots: list[int]) -> list[int]:
        at = {s: i for i, s in enumerate(self.order)}
        return [at[s] for s in slots]

    def _add(self, cache, length: int, slots: list[int]) -> None:
        """Append the rows of a cache prefilled without padding (``length`` real tokens per row)."""
        layers = _layers(cache)
        rows = int(layers[0].keys.shape[0])
        new_mask = torch.ones(rows, length, dtype=torch.long, device=self.dev)
        new_pos = torch.full((rows,), length, dtype=torch.long, device=self.dev)
        self.order += slots
        if self.cache is None:
            self.cache, self.mask, self.positions = cache, new_mask, new_pos
            return
        width = max(int(self.mask.shape[1]), length)
        for own, new in zip(_layers(self.cache), layers):
            own.keys = torch.cat([_left_pad(own.keys, width), _left_pad(new.keys, width)], dim=0)
            own.values = torch.cat([_left_pad(own.values, width), _left_pad(new.values, width)], dim=0)
        self.mask = torch.cat([_left_pad(self.mask, width, dim=1), _left_pad(new_mask, width, dim=1)], dim=0)
        self.positions = torch.cat([self.positions, new_pos])

    def _compact(self) -> None:
        """Drop released rows (one ``index_select``) and any all-padding leading columns."""
        if not self._gone:
            return
        keep = [i for i, s in enumerate(self.order) if s not in self._gone]
        self.order = [self.order[i] for i in keep]
        self._gone.clear()
        if not keep:
            self.cache = None
            self.mask, self.positions = self.mask[:0, :0], self.positions[:0]
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.dev)
        mask = self.mask.index_select(0, idx)
        real = mask.any(dim=0).nonzero()
        start = int(real[0]) if real.numel() else mask.shape[1]
        for layer in _layers(self.cache):
            layer.keys = layer.keys.index_select(0, idx)[:, :, start:]
            layer.values = layer.values.index_select(0, idx)[:, :, start:]
        self.mask = mask[:, start:]
        self.positions = self.positions.index_select(0, idx)


def _layers(cache) -> list:
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
