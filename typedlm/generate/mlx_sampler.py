"""MLXSampler: :class:`~typedlm.generate.sampler.BatchSampler`'s logits pipeline on MLX arrays, so a decode
step on the MLX backend copies back only the chosen ids (+ the logprobs asked for), not ``[n, V]`` logits.

The same order on the device: temperature -> top-k -> top-p -> padded ids to -inf -> grammar mask last
(xgrammar's ``apply_token_bitmask_mlx``; not for a row still reasoning) -> draw, with the same truncation
fallback. The stages this path does not hold (repetition penalty, user logits processors, ``logit_bias``)
and draft verification take the batch to the torch pipeline (one ``[n, V]`` copy), so those rules live in
one place. Draws are the torch sampler's exponential race, ``argmax(log p - log E)``: a seeded row's
``E`` comes from its own torch generator (it draws what it draws alone, and what it draws on the torch
backend, up to float rounding), unseeded rows' from ``mx.random``. Imported only on the MLX backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mlx.core as mx
import numpy as np
import torch
from xgrammar.kernels.apply_token_bitmask_mlx import apply_token_bitmask_mlx

from ..runner.mlx_kv import to_torch
from .sampler import BatchSampler

if TYPE_CHECKING:
    from .sequence import Sequence

TINY = 1e-30  # floor of an exponential draw (log of it stays finite; a masked -inf stays -inf)


def torch_only(p) -> bool:
    """Whether a row's parameters need a stage only the torch pipeline holds."""
    return p.repetition_penalty != 1.0 or bool(p.logits_processors) or bool(p.logit_bias)


class MLXSampler(BatchSampler):
    def stack(self, rows: list) -> mx.array:
        return mx.stack(rows).astype(mx.float32)

    def sample(self, logits, seqs: list["Sequence"], slots: list[int]):
        """Like the torch sampler's; returns the ids as an MLX array, or a torch tensor when a row needs
        the torch pipeline (:func:`torch_only`)."""
        if any(torch_only(s.params) for s in seqs):
            return super().sample(to_torch(logits), seqs, slots)
        return self._draw_mx(self._process_mx(logits, seqs, slots), seqs)

    def verify(self, logits, seq: "Sequence", slot: int, draft: int) -> bool:
        return super().verify(to_torch(logits), seq, slot, draft)

    def finish(self, tokens, seqs: list["Sequence"]) -> list[int]:
        if isinstance(tokens, torch.Tensor):
            return super().finish(tokens, seqs)
        both = mx.stack([tokens.astype(mx.int32), self._fallback.astype(mx.int32)]).tolist()
        for s, fb in zip(seqs, both[1]):
            s.truncation_fallbacks += fb
        return both[0]

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
        """Per-row top-k then top-p (removed ids -> -inf); one sort for the batch (as ``_truncate``)."""
        k = self._slot_values(self.top_k, slots)[:, None]
        top_p = self._slot_values(self.top_p, slots)[:, None]
        order = mx.argsort(-work, axis=1)
        srt = mx.take_along_axis(work, order, axis=1)
        kth = mx.take_along_axis(srt, mx.maximum(k - 1, 0), axis=1)
        kth = mx.where(k > 0, kth, -mx.inf)
        srt = mx.where(srt < kth, -mx.inf, srt)
        probs = mx.softmax(srt, axis=1)
        drop_sorted = ((mx.cumsum(probs, axis=1) - probs) > top_p) & (top_p < 1.0)
        drop = mx.put_along_axis(mx.zeros(work.shape, dtype=mx.bool_), order, drop_sorted, axis=1)
        return mx.where(drop | (work < kth), -mx.inf, work)

    def _mask_mx(self, work: mx.array, mask: mx.array | None, masked: list[bool]) -> mx.array:
        V = work.shape[1]
        if self.tok_vocab < V:  # padded lm_head rows never decode
            work = mx.where(mx.arange(V) >= self.tok_vocab, -mx.inf, work)
        if mask is None:
            return work
        return mx.where(mx.array(masked)[:, None], apply_token_bitmask_mlx(mask, work, V), work)

    def _draw_mx(self, work: mx.array, seqs: list["Sequence"]) -> mx.array:
        tokens = mx.argmax(work, axis=1)
        sampled = [not s.params.greedy for s in seqs]
        if not any(sampled):
            return tokens
        race = -mx.log(mx.maximum(mx.random.uniform(shape=work.shape), TINY))  # Exp(1) per id
        seeded = [sampled[i] and s.generator is not None for i, s in enumerate(seqs)]
        if any(seeded):
            own = np.ones(work.shape, dtype=np.float32)
            for i, s in enumerate(seqs):
                if seeded[i]:
                    own[i] = torch.empty(work.shape[1]).exponential_(1.0, generator=s.generator).numpy()
            race = mx.where(mx.array(seeded)[:, None], mx.array(own), race)
        drawn = mx.argmax(work - mx.log(mx.maximum(race, TINY)), axis=1)
        return mx.where(mx.array(sampled), drawn, tokens)

    @staticmethod
    def _slot_values(values: torch.Tensor, slots: list[int]) -> mx.array:
        return mx.array(values[slots].numpy())
