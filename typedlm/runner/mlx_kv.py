"""MLXKV: the decode KV cache of the MLX backend — mlx-lm's ``BatchKVCache`` per layer, addressed by slot.

Rows of different lengths sit left-padded in one batch (mlx-lm's layout: ``left_padding[i]`` leading
columns of row ``i`` are masked, its RoPE offset is its own length). Every held row steps together
(``partial_steps = False``), like the torch :class:`~typedlm.runner.dynamic_kv.DynamicKV`:

* ``prefill`` runs new rows (one length, no padding) in a fresh batch cache, then ``extend``s the held one;
* ``extend`` with rows of different token counts feeds them right-padded and rolls each row's padding to
  its front afterwards (mlx-lm's own ``prepare(right_padding=...)`` / ``finalize``), so the padding
  becomes masked left padding;
* ``truncate`` is the same roll with the dropped tokens as the padding (per-row KV truncation, which
  jump-forward and draft rejection need);
* ``release`` marks a row; the next forward drops released rows with mlx-lm's ``filter``.

Logits stay MLX arrays (``[n, V]``, the model's dtype): the scheduler hands them to the MLX sampler
(:mod:`typedlm.generate.mlx_sampler`), which copies back only the chosen ids.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import torch

from ..errors import TypedLMError
from .slots import CompactingSlotCache, SlotPool


def to_torch(logits: mx.array) -> torch.Tensor:
    """An MLX array -> a float32 torch CPU tensor (one copy through numpy)."""
    return torch.from_numpy(np.array(logits.astype(mx.float32)))


class MLXKV(CompactingSlotCache):
    partial_steps = False
    device_feed = False

    def __init__(self, runner, *, capacity: int, max_len: int):
        self.runner, self.capacity, self.max_len = runner, capacity, max_len
        self.slots = SlotPool(capacity)
        self.order: list[int] = []  # slot of each batch row
        self.length: dict[int, int] = {}  # tokens in each held slot
        self._gone: set[int] = set()
        self.cache: list | None = None  # one mlx-lm BatchKVCache per layer, or None while empty

    # -- forwards ---------------------------------------------------------------------------------
    def prefill(self, ids, slots: list[int], past=None) -> mx.array:
        """Rows of one length (host lists or a tensor) into fresh slots; ``past`` must be None (no prefix cache)."""
        if past is not None:
            raise TypedLMError("the MLX backend has no prefix cache: a prefill starts at position 0")
        rows = ids.tolist() if isinstance(ids, torch.Tensor) else [list(r) for r in ids]
        if len(rows[0]) > self.max_len:
            raise TypedLMError(f"prompt of {len(rows[0])} tokens is longer than the context ({self.max_len})")
        self._compact()
        logits, cache = self.runner.last_logits(mx.array(rows), self.runner.batch_cache(len(rows)))
        if self.cache is None:
            self.cache = cache
        else:
            for own, new in zip(self.cache, cache):
                own.extend(new)
        self.order += slots
        for s in slots:
            self.length[s] = len(rows[0])
        return logits

    def step(self, tokens: list[int], slots: list[int]) -> mx.array:
        return self.extend([[t] for t in tokens], slots)

    def extend(self, tokens: list[list[int]], slots: list[int], every: bool = False) -> mx.array:
        self._compact()
        rows = self._rows(slots)
        if sorted(rows) != list(range(len(self.order))):
            raise TypedLMError("MLXKV steps every held row together (partial_steps is False)")
        if max(self.length[s] + len(t) for s, t in zip(slots, tokens)) > self.max_len:
            raise TypedLMError(f"a row reached the model's context ({self.max_len} tokens)")
        by_row = [None] * len(rows)
        for r, t in zip(rows, tokens):
            by_row[r] = t
        k = max(len(t) for t in by_row)
        pad = [k - len(t) for t in by_row]
        if max(pad):
            for c in self.cache:
                c.prepare(right_padding=pad)
        if every:  # the caller's rows at their fed positions only (no lm_head on the padding)
            at = [(i, r, j) for i, r in enumerate(rows) for j in range(k - pad[r])]
            take, pos = mx.array([a[1] for a in at]), mx.array([a[2] for a in at])
        else:  # the caller's rows after their last token
            take, pos = mx.array(rows), mx.array([k - 1 - pad[r] for r in rows])
        logits, _ = self.runner.forward(mx.array([t + [0] * p for t, p in zip(by_row, pad)]), self.cache,
                                        pick=lambda lg: lg[take, pos], wait=False)
        if every:  # -> [n, k, V]; positions past a row's feed stay zero (never read)
            out = mx.zeros((len(rows), k, logits.shape[-1]), dtype=logits.dtype)
            out[mx.array([a[0] for a in at]), pos] = logits
            logits = out
        if max(pad):
            self._finalize()
        for s, t in zip(slots, tokens):
            self.length[s] += len(t)
        return logits

    def read(self, slot: int, a: int, b: int) -> torch.Tensor:
        """KV of tokens ``[a, b)`` of ``slot`` -> float32 ``[layers, 2, kv_heads, b - a, head_dim]`` (a copy)."""
        self._compact()
        r = self._rows([slot])[0]
        out = []
        for c in self.cache:
            pad = int(c.left_padding[r].item())
            keys, values = c.keys_and_values()
            out.append(mx.stack([keys[r, :, pad + a: pad + b], values[r, :, pad + a: pad + b]]))
        return to_torch(mx.stack(out))

    def truncate(self, drop: list[int], slots: list[int]) -> None:
        """The last ``drop[i]`` columns of each row roll to its front and become masked left padding."""
        self._compact()
        pad = [0] * len(self.order)
        for r, s, n in zip(self._rows(slots), slots, drop):
            pad[r] = n
            self.length[s] -= n
        if max(pad, default=0):
            for c in self.cache:
                c.prepare(right_padding=pad)
            self._finalize()

    # -- rows ---------------------------------------------------------------------------------------
    def _finalize(self) -> None:
        for c in self.cache:
            c.finalize()
        mx.eval([c.state for c in self.cache])

    def _rows(self, slots: list[int]) -> list[int]:
        at = {s: i for i, s in enumerate(self.order)}
        return [at[s] for s in slots]

    def _compact(self) -> None:
        """Drop released rows (mlx-lm's ``filter``, which also trims padding every row shares)."""
        if not self._gone:
            return
        keep = [i for i, s in enumerate(self.order) if s not in self._gone]
        for s in self._gone:
            self.length.pop(s, None)
        self.order = [self.order[i] for i in keep]
        self._gone.clear()
        if not keep:
            self.cache = None
            return
        idx = mx.array(keep)
        for c in self.cache:
            c.filter(idx)
