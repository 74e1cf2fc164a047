"""MLXSampler: :class:`~typedlm.generate.sampler.BatchSampler`'s logits pipeline on MLX arrays, so a decode
step on the MLX backend copies back only the chosen ids (+ the logprobs asked for), not ``[n, V]`` logits.

The same order on the device: temperature -> top-k -> top-p -> padded ids to -inf -> grammar mask last
(``grammar.backends.masks.apply_mlx``; not for a row still reasoning) -> draw, with the same truncation
fallback. The stages this path does not hold (repetition penalty, user logits processors, ``logit_bias``)
and draft verification run in the torch pipeline for that step (one ``[n, V]`` copy), so those rules live
in one place; the draw is always this one.

Truncation keeps the ids whose value is at least the cut (the ``k``-th largest value; the last value of the
smallest sorted prefix reaching ``top_p``), as the torch sampler does up to ties at the cut (kept here).
The cut is found among the ``HEAD`` (or the largest top-k) largest values of each row (one partition, a
small sort); a nucleus wider than that falls back to a sort of the whole row (one host check): same cut.

Draws are Gumbel-max races, ``argmax(logits + G)``. A seeded row's noise comes from its own MLX key
(``mx.random.key(seed)``, split once a draw), so it draws what it draws alone, whatever the batch; the
torch backend draws from a torch generator instead, so the two backends give different seeded samples
(greedy rows are equal). Unseeded rows use ``mx.random``. Imported only on the MLX backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mlx.core as mx
import torch
from ..grammar.backends.masks import apply_mlx

from ..runner.mlx_kv import to_torch
from .sampler import BatchSampler

if TYPE_CHECKING:
    from .sequence import Sequence

HEAD = 1024  # values per row the truncation cut is first searched among
SEED_BITS = (1 << 64) - 1


def torch_only(p) -> bool:
    """Whether a row's parameters need a stage only the torch pipeline holds."""
    return p.repetition_penalty != 1.0 or bool(p.logits_processors) or bool(p.logit_bias)


class MLXSampler(BatchSampler):
    def __init__(self, **kw):
        super().__init__(**kw)
        self._keys: dict[int, mx.array] = {}  # slot -> the MLX key of a seeded row

    def admit(self, slot: int, seq: "Sequence") -> None:
        super().admit(slot, seq)
        if seq.generator is not None:
            self._keys[slot] = mx.random.key(seq.params.seed & SEED_BITS)
        else:
            self._keys.pop(slot, None)

    def stack(self, rows: list) -> mx.array:
        return mx.stack(rows).astype(mx.float32)

    def sample(self, logits, seqs: list["Sequence"], slots: list[int]) -> mx.array:
        """Like the torch sampler's; the ids as an MLX array. A row that needs a torch-only stage
        (:func:`torch_only`) takes the batch through the torch pipeline up to the draw."""
        if any(torch_only(s.params) for s in seqs):
            work = mx.array(self._process(to_torch(logits), seqs, slots).numpy())
            self._fallback = mx.array(self._fallback.numpy())
            tokens = self._draw_mx(work, seqs, slots)
            if self.seen is not None:
                self.seen[slots, torch.tensor(tokens.tolist())] = True
            return tokens
        return self._draw_mx(self._process_mx(logits, seqs, slots), seqs, slots)

    def verify(self, logits, seq: "Sequence", slot: int, draft: int) -> bool:
        return super().verify(to_torch(logits), seq, slot, draft)

    def send(self, tokens: mx.array) -> None:
        self._sent = mx.stack([tokens.astype(mx.int32), self._fallback.astype(mx.int32)])  # ``receive`` evaluates it

    def log_softmax(self, logits, want: list[int]):
        rows = logits[mx.array(want)]
        return rows - mx.logsumexp(rows, axis=-1, keepdims=True)

    def logprobs(self, lp, tokens: list[int], ks: list[int], vocab: int) -> list[tuple[float, list]]:
        """(logprob of each row's token, its top-``k`` (id, logprob)) with one host copy of those values."""
        chosen = lp[mx.arange(len(tokens)), mx.array(tokens)]
        k = max(ks)
        if not k:
            return [(v, []) for v in chosen.tolist()]
        head = lp[:, :vocab]
        idx = mx.argpartition(-head, kth=k - 1, axis=-1)[:, :k]
        vals = mx.take_along_axis(head, idx, axis=-1)
        order = mx.argsort(-vals, axis=-1)
        idx, vals = mx.take_along_axis(idx, order, axis=-1), mx.take_along_axis(vals, order, axis=-1)
        c, i, v = chosen.tolist(), idx.tolist(), vals.tolist()
        return [(c[r], list(zip(i[r][:kr], v[r][:kr]))) for r, kr in enumerate(ks)]

    # -- the pipeline on the device ------------------------------------------------------------------
    def _process_mx(self, logits: mx.array, seqs: list["Sequence"], slots: list[int]) -> mx.array:
        params = [s.params for s in seqs]
        if any(not p.greedy and p.temperature != 1.0 for p in params):
            logits = logits / self._slot_values(self.temperature, slots)[:, None]
        truncating = any(p.truncating for p in params)
        work = self._truncate_mx(logits, slots) if truncating else logits
        masked = [s.masked for s in seqs]
        mask = mx.array(self.bitmask[slots].numpy()) if any(masked) else None
        work = self._mask_mx(work, mask, masked)
        self._fallback = mx.zeros(len(seqs), dtype=mx.bool_)
        if truncating and mask is not None:
            flags = mx.array([p.truncating and m for p, m in zip(params, masked)])
            self._fallback = flags & ~mx.isfinite(work).any(axis=1)
            work = mx.where(self._fallback[:, None], self._mask_mx(logits, mask, masked), work)
        return work

    def _truncate_mx(self, work: mx.array, slots: list[int]) -> mx.array:
        """Per-row top-k then top-p (ids below the cut -> -inf); see the module docstring."""
        k = self._slot_values(self.top_k, slots)[:, None]
        top_p = self._slot_values(self.top_p, slots)[:, None]
        nucleus = bool((self.top_p[slots] < 1.0).any())
        head = max(int(self.top_k[slots].max()), HEAD if nucleus else 1)
        for n in ((head, work.shape[1]) if head < work.shape[1] else (work.shape[1],)):
            srt = _largest(work, n)
            kth = mx.where(k > 0, mx.take_along_axis(srt, mx.maximum(k - 1, 0), axis=1), -mx.inf)
            if not nucleus:
                return mx.where(work < kth, -mx.inf, work)
            lse = mx.logsumexp(mx.where(work < kth, -mx.inf, work), axis=1, keepdims=True)  # top-k renormalized
            probs = mx.exp(mx.where(srt < kth, -mx.inf, srt) - lse)
            keep = ((mx.cumsum(probs, axis=1) - probs) <= top_p).sum(axis=1, keepdims=True)
            if n < work.shape[1] and not ((keep < n) | (top_p >= 1.0) | (k > 0)).all().item():
                continue  # a nucleus wider than the head: the whole row
            cut = mx.where(top_p < 1.0, mx.take_along_axis(srt, keep - 1, axis=1), -mx.inf)
            return mx.where((work < kth) | (work < cut), -mx.inf, work)

    def _mask_mx(self, work: mx.array, mask: mx.array | None, masked: list[bool]) -> mx.array:
        V = work.shape[1]
        if self.tok_vocab < V:  # padded lm_head rows never decode
            work = mx.where(mx.arange(V) >= self.tok_vocab, -mx.inf, work)
        if mask is None:
            return work
        return mx.where(mx.array(masked)[:, None], apply_mlx(mask, work, V), work)

    def _draw_mx(self, work: mx.array, seqs: list["Sequence"], slots: list[int]) -> mx.array:
        sampled = [not s.params.greedy for s in seqs]
        if any(sampled):
            V = work.shape[1]
            work = work + mx.stack([mx.zeros((V,)) if not on else mx.random.gumbel((V,), key=self._next_key(slot))
                                    if slot in self._keys else mx.random.gumbel((V,)) for slot, on in zip(slots, sampled)])
        return mx.argmax(work, axis=1)

    def _next_key(self, slot: int) -> mx.array:
        key, use = mx.random.split(self._keys[slot])
        self._keys[slot] = key
        return use

    @staticmethod
    def _slot_values(values: torch.Tensor, slots: list[int]) -> mx.array:
        return mx.array(values[slots].numpy())


def _largest(work: mx.array, n: int) -> mx.array:
    """Each row's ``n`` largest values, in descending order (``n`` < V: one partition, then a sort of those)."""
    if n < work.shape[1]:
        work = mx.partition(-work, kth=n - 1, axis=1)[:, :n]
        return -mx.sort(work, axis=1)
    return -mx.sort(-work, axis=1)
