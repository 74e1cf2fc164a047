"""The batched logits pipeline: one pass over the whole decode batch per step.

Order, for every row and every step (the invariant the tests pin):
  repetition penalty -> user logits processors -> logit_bias -> temperature -> top-k -> top-p
  -> padded-vocab ids to -inf -> grammar mask (always last; not for a row still reasoning) -> sample.
If top-k/top-p removed every token the grammar allows, the row is re-derived without truncation
(still penalized, scaled and grammar-masked) and the event is counted on the sequence.

:class:`BatchSampler` runs that pipeline on one ``[B, V]`` tensor: per-row temperature / top-k /
top-p / penalty come from per-slot device tensors written once when a row is admitted; the
repetition penalty reads a per-slot ``seen`` bitmap updated by one scatter per step; grammar rows
fill one ``[max_batch, V/32]`` host bitmask (``GrammarBatch``, rows without a grammar are
skipped) that is copied once and applied by xgrammar's kernel (``apply_bitmask``); draws are exponential races, one
``exponential_`` per seeded row on its own generator (so a seeded row draws exactly what it draws
alone) and one for all unseeded rows (``argmax(p / Exp(1))``: one device op; ``torch.multinomial`` ran
free text at 12.9 tok/s vs 34 for JSON on the H200, ``bench/scripts/gpu_smoke.py``); the step ends in one host transfer
(``send``: a pinned copy and an event; ``receive`` waits for that event alone, so the scheduler can queue the
next forward on the ids still on the device first). Stages no row needs are
skipped. User ``logits_processors`` are the opt-in slow path (a Python call per row); ``logit_bias``
is sparse: the (row, id, bias) triples of all rows go into one ``index_put_`` (accumulating).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..grammar.controller import GrammarBatch, apply_bitmask
from ..runner.tensors import device_tensor

if TYPE_CHECKING:
    from .sequence import Sequence


class BatchSampler:
    """The logits pipeline for up to ``max_batch`` rows, each identified by a slot for its life."""

    def __init__(self, *, max_batch: int, vocab_size: int, tokenizer_vocab_size: int, device: torch.device):
        self.max_batch, self.vocab, self.tok_vocab, self.device = max_batch, vocab_size, tokenizer_vocab_size, device
        words = (vocab_size + 31) // 32
        # host bitmask, one row per slot (pinned on CUDA: uploaded asynchronously, see ``upload``)
        self.bitmask = torch.zeros(max_batch, words, dtype=torch.int32, pin_memory=device.type == "cuda")
        self._device_mask = self.bitmask if device.type == "cpu" else torch.zeros_like(self.bitmask, device=device)
        self._dirty = False
        self._grammars = GrammarBatch()
        self.temperature = torch.ones(max_batch, device=device)
        self.top_k = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.top_p = torch.ones(max_batch, device=device)
        self.penalty = torch.ones(max_batch, device=device)
        self.seen: torch.Tensor | None = None  # [max_batch, V] bool, allocated when a row first needs it
        if device.type == "cuda":  # the step's ids and fallbacks on their way to the host (``send``)
            self._arrived = torch.zeros(2, max_batch, dtype=torch.long, pin_memory=True)
            self._ready = torch.cuda.Event()

    # -- row life ---------------------------------------------------------------------------------
    def admit(self, slot: int, seq: "Sequence") -> None:
        """Write the row's parameters into its slot; attach its grammar to the shared bitmask."""
        p = seq.params
        self.temperature[slot] = p.temperature if (not p.greedy and p.temperature != 1.0) else 1.0
        self.top_k[slot] = p.top_k if 0 < p.top_k < self.vocab else 0
        self.top_p[slot] = p.top_p
        self.penalty[slot] = p.repetition_penalty
        if p.repetition_penalty != 1.0:
            if self.seen is None:
                self.seen = torch.zeros(self.max_batch, self.vocab, dtype=torch.bool, device=self.device)
            self.seen[slot] = False
            ids = torch.tensor(sorted({i for i in seq.prompt_ids + seq.output_ids if i < self.vocab}),
                               dtype=torch.long, device=self.device)
            self.seen[slot, ids] = True
        if seq.grammar is not None:
            seq.grammar.attach(self.bitmask, slot, self._written)

    def saw(self, slot: int, seq: "Sequence", ids: list[int]) -> None:
        """Tokens appended without sampling (forced) count as seen for the repetition penalty."""
        if ids and seq.params.repetition_penalty != 1.0:
            self.seen[slot, device_tensor(ids, self.device)] = True

    def fill(self, seqs: list["Sequence"]) -> None:
        """Fill the masks of every grammar row whose matcher state moved (one batched call)."""
        rows = [s.grammar for s in seqs if s.grammar is not None and not s.grammar.filled and not s.finished]
        if not rows:
            return
        self._grammars.fill(rows, self.bitmask)
        self._dirty = True

    def _written(self) -> None:
        self._dirty = True

    def upload(self) -> None:
        """Queue the copy of the filled masks to the device (before the step's forward, so it runs
        ahead of it instead of waiting behind it). The host rows are refilled only after the next
        ``finish`` (a sync), so the asynchronous copy always reads settled data."""
        if self._dirty and self._device_mask is not self.bitmask:
            self._device_mask.copy_(self.bitmask, non_blocking=True)
        self._dirty = False
    # -- one step ---------------------------------------------------------------------------------
    def stack(self, rows: list[torch.Tensor]) -> torch.Tensor:
        """Each row's next logits -> the step's ``[B, V]`` (a private copy: :meth:`sample` changes it)."""
        return torch.stack(rows)

    def log_softmax(self, logits: torch.Tensor, want: list[int]) -> torch.Tensor:
        """Log-probabilities of the raw logits of rows ``want`` (taken before :meth:`sample`)."""
        return torch.log_softmax(logits[want], dim=-1)

    def logprobs(self, lp: torch.Tensor, tokens: list[int], ks: list[int], vocab: int) -> list[tuple[float, list]]:
        """Per row of ``lp``: (logprob of its token, its top-``k`` (id, logprob) among the first ``vocab`` ids)."""
        out = []
        for row, (t, k) in enumerate(zip(tokens, ks)):
            top = torch.topk(lp[row, :vocab], k) if k else None
            out.append((float(lp[row, t]), list(zip(top.indices.tolist(), top.values.tolist())) if k else []))
        return out

    def sample(self, logits: torch.Tensor, seqs: list["Sequence"], slots: list[int]) -> torch.Tensor:
        """Pick one id per row of ``logits`` ([B, V] float32, a private copy: changed in place).
        Returns the ids as a device tensor ``[B]``; ``truncation_fallbacks`` is counted via
        :meth:`finish`, which does the step's one host transfer."""
        work = self._process(logits, seqs, slots)
        tokens = self._draw(work, seqs)
        if self.seen is not None:
            self.seen[device_tensor(slots, logits.device), tokens] = True
        return tokens

    def verify(self, logits: torch.Tensor, seq: "Sequence", slot: int, draft: int) -> bool:
        """Whether the row takes the grammar's ``draft`` token at this position (jump-forward as
        speculative decoding with the grammar as the drafter). ``logits``: the row's raw logits there
        ([V]); the row's grammar is at the state before ``draft`` (its mask is filled here). The
        whole pipeline runs as in :meth:`sample`, so a greedy row accepts exactly when its masked
        choice is ``draft``; a sampling row accepts with probability p(draft) under its processed
        distribution, drawn from its own generator (a deterministic draft's exact rule; on a
        rejection the caller takes the next token from p without ``draft``: :meth:`forbid`).
        Nothing is marked seen (an accepted draft goes through :meth:`saw`)."""
        self.fill([seq])
        work = self._process(logits.unsqueeze(0).clone(), [seq], [slot])
        if seq.params.greedy:
            take = torch.argmax(work[0]) == draft
        else:
            u = torch.rand((), device=work.device, generator=seq.generator)
            take = u < torch.softmax(work[0], dim=0)[draft]
        ok, fb = torch.stack([take.long(), self._fallback[0].long()]).tolist()
        seq.truncation_fallbacks += fb if ok else 0
        return bool(ok)

    def forbid(self, seq: "Sequence", token: int) -> None:
        """Remove ``token`` from the row's filled grammar mask for its next draw (a rejected draft)."""
        seq.grammar.forbid(token)

    def _process(self, logits: torch.Tensor, seqs: list["Sequence"], slots: list[int]) -> torch.Tensor:
        """Every stage of the pipeline up to the grammar mask (in place on ``logits``) -> the logits
        each row draws from; sets ``_fallback``."""
        dev = logits.device
        params = [s.params for s in seqs]
        slot_t = device_tensor(slots, dev)
        if self.seen is not None and any(p.repetition_penalty != 1.0 for p in params):
            pen = self.penalty[slot_t].unsqueeze(1)
            scaled = torch.where(logits > 0, logits / pen, logits * pen)
            logits.copy_(torch.where(self.seen[slot_t], scaled, logits))
        for i, s in enumerate(seqs):  # opt-in slow path
            if s.params.logits_processors:
                seen = s.prompt_ids + s.output_ids
                row = logits[i]
                for proc in s.params.logits_processors:
                    out = proc(seen, row)
                    if out is not None and out is not row:
                        row.copy_(out)
        bias = [(i, t, b) for i, p in enumerate(params) for t, b in p.logit_bias]
        if bias:
            rows, ids, vals = zip(*bias)
            logits.index_put_((device_tensor(list(rows), dev), device_tensor(list(ids), dev)),
                              device_tensor(list(vals), dev, logits.dtype), accumulate=True)
        if any(not p.greedy and p.temperature != 1.0 for p in params):
            logits.div_(self.temperature[slot_t].unsqueeze(1))
        truncating = any(p.truncating for p in params)
        work = logits.clone() if truncating else logits
        if truncating:
            self._truncate(work, slot_t)
        grammar_rows = [i for i, s in enumerate(seqs) if s.masked]
        mask = None
        if grammar_rows:
            self.upload()
            mask = self._device_mask[: len(slots)] if slots == list(range(len(slots))) else self._device_mask[slot_t]
        self._mask(work, mask, grammar_rows)
        fallback = torch.zeros(len(seqs), dtype=torch.bool, device=dev)
        if truncating and grammar_rows:
            trunc_grammar = device_tensor([p.truncating and s.masked for p, s in zip(params, seqs)],
                                          dev, torch.bool)
            fallback = trunc_grammar & ~torch.isfinite(work).any(dim=1)
            self._mask(logits, mask, grammar_rows)
            work = torch.where(fallback.unsqueeze(1), logits, work)
        self._fallback = fallback
        return work

    def _draw(self, work: torch.Tensor, seqs: list["Sequence"]) -> torch.Tensor:
        dev = work.device
        sampled = [not s.params.greedy for s in seqs]
        tokens = torch.argmax(work, dim=1)
        if any(sampled):
            probs = torch.softmax(work, dim=1)
            race = torch.empty_like(probs)
            unseeded = [i for i, s in enumerate(seqs) if sampled[i] and s.generator is None]
            if unseeded:
                race.exponential_(1.0)
            for i, s in enumerate(seqs):
                if sampled[i] and s.generator is not None:
                    race[i].exponential_(1.0, generator=s.generator)
            drawn = torch.argmax(probs / race, dim=1)
            tokens = torch.where(device_tensor(sampled, dev, torch.bool), drawn, tokens)
        return tokens

    def finish(self, tokens: torch.Tensor, seqs: list["Sequence"]) -> list[int]:
        """The step's one host transfer: ids and truncation fallbacks together."""
        self.send(tokens)
        return self.receive(seqs)

    def send(self, tokens: torch.Tensor) -> None:
        """Queue the copy of the ids and fallbacks to the host (pinned; an event marks it done): work queued after
        it (the next forward, on the same ids kept on the device) does not delay :meth:`receive`."""
        both = torch.stack([tokens, self._fallback.long()])
        if self.device.type == "cuda":
            both = self._arrived[:, : both.shape[1]].copy_(both, non_blocking=True)
            self._ready.record()
        self._sent = both

    def receive(self, seqs: list["Sequence"]) -> list[int]:
        """Wait for :meth:`send`'s copy alone -> the ids; counts each row's truncation fallback."""
        if self.device.type == "cuda":
            self._ready.synchronize()
        ids, fallbacks = self._sent.tolist()
        for s, fb in zip(seqs, fallbacks):
            s.truncation_fallbacks += fb
        return ids

    def _truncate(self, work: torch.Tensor, slot_t: torch.Tensor) -> None:
        """Per-row top-k then top-p, in place (removed ids -> -inf); one sort for the batch."""
        k = self.top_k[slot_t]
        top_p = self.top_p[slot_t].unsqueeze(1)
        srt, order = torch.sort(work, dim=1, descending=True)
        kth = srt.gather(1, (k - 1).clamp(min=0).unsqueeze(1))
        kth = torch.where(k.unsqueeze(1) > 0, kth, torch.full_like(kth, float("-inf")))
        srt = srt.masked_fill(srt < kth, float("-inf"))
        probs = torch.softmax(srt, dim=1)
        cum = torch.cumsum(probs, dim=1)
        drop_sorted = (cum - probs > top_p) & (top_p < 1.0)  # keep the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter_(1, order, drop_sorted)
        work.masked_fill_(drop | (work < kth), float("-inf"))

    def _mask(self, logits: torch.Tensor, mask: torch.Tensor | None, grammar_rows: list[int]) -> None:
        logits[:, self.tok_vocab:] = float("-inf")  # padded lm_head rows never decode
        if mask is not None:  # last: nothing after this may re-allow an id
            apply_bitmask(logits, mask, vocab_size=self.vocab,
                          indices=grammar_rows if len(grammar_rows) < logits.shape[0] else None)

