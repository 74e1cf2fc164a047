"""Sequence: one request's decode state and its per-step rules (select a token, append it, finish).

The single-request loop and the batching scheduler both drive sequences through the same three
calls, so the invariants live in one place:

  ``begin_step()``        fill the grammar mask; a complete grammar finishes the row (no sampling)
  ``select(logits_row)``  the logits pipeline of :mod:`sampling`, grammar mask last, then sample
  ``append(token)``       matcher accepts the sampled token (rejection = internal error on the
                          result); a grammar that is now complete, a stop id, a stop string or
                          max_tokens ends the row
  ``more()``              tokens appended without sampling right after: the forced end of a
                          reasoning block past its budget, or jump-forward text the grammar forces

A row with ``reasoning`` starts inside a ``<think>`` block: the grammar, stop strings and the
answer text begin after its end marker (:mod:`.reasoning`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..grammar.controller import GrammarRow
from ..grammar.spec import Constraint
from .detokenize import Detokenizer
from .reasoning import ReasoningState
from .sampling import SamplingParams, apply_logit_bias, apply_repetition_penalty, sample, truncate


@dataclass
class Timings:
    compile: float = 0.0
    prefill: float = 0.0
    decode: float = 0.0

    @property
    def total(self) -> float:
        return self.compile + self.prefill + self.decode

    def as_dict(self) -> dict:
        return {"compile": self.compile, "prefill": self.prefill, "decode": self.decode, "total": self.total}


@dataclass
class Sequence:
    prompt_ids: list[int]
    params: SamplingParams
    tokenizer_vocab_size: int
    stop_ids: frozenset[int]
    decode: Callable[[list[int]], str] = str  # ids -> text (the finalizer's one full decode)
    detok: Detokenizer | None = None  # the answer's text, incrementally (stop strings)
    grammar: GrammarRow | None = None
    reasoning: ReasoningState | None = None
    jump: Any = None  # grammar.jump_forward.JumpForward when jump-forward is on
    constraint: Constraint | None = None
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "length" | "error" | "abort"
    error: str | None = None
    stop_text_at: int | None = None  # char offset where a stop string began
    truncation_fallbacks: int = 0
    forced_tokens: int = 0  # appended without sampling (jump-forward, forced end of reasoning)
    timings: Timings = field(default_factory=Timings)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def finish(self, reason: str, error: str | None = None) -> None:
        if self.finish_reason is None:
            self.finish_reason = reason
            self.error = error

    # -- step ------------------------------------------------------------------------------------
    def begin_step(self) -> bool:
        """Prepare this step's mask. Returns False when the row finished instead of sampling."""
        if self.finished:
            return False
        return self.grammar is None or self._deferred or self._grammar_open()

    @property
    def _deferred(self) -> bool:
        """Inside the reasoning block: the grammar has not started yet."""
        return self.reasoning is not None and self.reasoning.active

    def select(self, logits: torch.Tensor) -> int:
        """Pick the next id from this row's raw logits (1-D, float32, a private copy: changed in place)."""
        p = self.params
        seen = self.prompt_ids + self.output_ids
        apply_repetition_penalty(logits, seen, p.repetition_penalty)
        for proc in p.logits_processors:
            out = proc(seen, logits)
            if out is not None and out is not logits:
                logits.copy_(out)
        apply_logit_bias(logits, p.logit_bias)
        if not p.greedy and p.temperature != 1.0:
            logits.div_(p.temperature)
        truncating = bool(p.top_k) or p.top_p < 1.0
        work = logits.clone() if truncating else logits
        if truncating:
            truncate(work, p.top_k, p.top_p)
        self._mask(work)
        if truncating and self.grammar is not None and not torch.isfinite(work).any():
            # top-k / top-p removed every id the grammar allows: keep the grammar, drop truncation
            self.truncation_fallbacks += 1
            work = logits
            self._mask(work)
        return sample(work, p, self.generator)

    def _mask(self, logits: torch.Tensor) -> None:
        logits[self.tokenizer_vocab_size:] = float("-inf")  # padded lm_head rows never decode
        if self.grammar is not None and not self._deferred:
            self.grammar.apply(logits)  # last: nothing after this may re-allow an id

    def append(self, token: int, *, forced: bool = False, last: bool = True) -> None:
        """``last=False``: more forced tokens follow at once, so the next mask is not computed yet."""
        deferred = self._deferred
        if self.grammar is not None and not deferred and not self.grammar.accept(token):
            self.finish("error", f"internal error: grammar rejected {'forced' if forced else 'sampled'} token "
                                 f"{token} at step {len(self.output_ids)}")
            return
        if token in self.stop_ids:
            self.finish("stop")
            return
        self.output_ids.append(token)
        self.forced_tokens += forced
        if deferred:
            self.reasoning.observe(token, len(self.output_ids) - 1)
        elif self.detok is not None:
            self.detok.add(token)
            if self.detok.stop_at is not None:
                self.stop_text_at = self.detok.stop_at
                self.finish("stop")
                return
        if not last:
            return
        if self.grammar is not None and not self._deferred and not self._grammar_open():
            return  # next step's mask is computed now: a complete grammar ends the row before any forward
        if len(self.output_ids) >= self.params.max_tokens:
            self.finish("length")

    def more(self) -> list[int]:
        """Append the tokens that follow without sampling; returns those actually appended."""
        if self.finished:
            return []
        if self._deferred:
            ids = self.reasoning.forced()
        elif self.jump is not None and self.grammar is not None:
            ids = self.jump.tokens(self)
        else:
            return []
        out = []
        ids = ids[: self.params.max_tokens - len(self.output_ids)]
        for i, t in enumerate(ids):
            n = len(self.output_ids)
            self.append(t, forced=True, last=i == len(ids) - 1)
            if len(self.output_ids) > n:
                out.append(t)
            if self.finished:
                break
        return out

    def _grammar_open(self) -> bool:
        self.grammar.fill()
        state = self.grammar.state()
        if state == "complete":
            self.finish("stop")
        elif state == "dead":
            self.finish("error", "grammar allows no next token: the tokenizer cannot produce the text the "
                                 f"grammar requires (after {len(self.output_ids)} tokens)")
        return state == "open"
