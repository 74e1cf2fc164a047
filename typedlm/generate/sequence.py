"""Sequence: one request's decode state and its per-step rules (select a token, append it, finish).

The single-request loop and the batching scheduler both drive sequences through the same three
calls, so the invariants live in one place:

  ``begin_step()``        fill the grammar mask; a complete grammar finishes the row (no sampling)
  ``select(logits_row)``  the logits pipeline of :mod:`sampling`, grammar mask last, then sample
  ``append(token)``       matcher accepts the sampled token (rejection = internal error on the
                          result); a grammar that is now complete, a stop id, a stop string or
                          max_tokens ends the row
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..grammar.controller import GrammarRow
from ..grammar.spec import Constraint
from .sampling import SamplingParams, apply_repetition_penalty, sample, truncate


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
    decode: Callable[[list[int]], str] = str
    grammar: GrammarRow | None = None
    constraint: Constraint | None = None
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "length" | "error" | "abort"
    error: str | None = None
    stop_text_at: int | None = None  # char offset where a stop string began
    truncation_fallbacks: int = 0
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
        return self.grammar is None or self._grammar_open()

    def select(self, logits: torch.Tensor) -> int:
        """Pick the next id from this row's raw logits (1-D, float32, a private copy: changed in place)."""
        p = self.params
        seen = self.prompt_ids + self.output_ids
        apply_repetition_penalty(logits, seen, p.repetition_penalty)
        for proc in p.logits_processors:
            out = proc(seen, logits)
            if out is not None and out is not logits:
                logits.copy_(out)
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
        if self.grammar is not None:
            self.grammar.apply(logits)  # last: nothing after this may re-allow an id

    def append(self, token: int) -> None:
        if self.grammar is not None and not self.grammar.accept(token):
            self.finish("error", f"internal error: grammar rejected sampled token {token} "
                                 f"at step {len(self.output_ids)}")
            return
        if token in self.stop_ids:
            self.finish("stop")
            return
        self.output_ids.append(token)
        if self.params.stop and self._hit_stop_string():
            self.finish("stop")
            return
        if self.grammar is not None and not self._grammar_open():
            return  # next step's mask is computed now: a complete grammar ends the row before any forward
        if len(self.output_ids) >= self.params.max_tokens:
            self.finish("length")

    def _grammar_open(self) -> bool:
        self.grammar.fill()
        state = self.grammar.state()
        if state == "complete":
            self.finish("stop")
        elif state == "dead":
            self.finish("error", "grammar allows no next token: the tokenizer cannot produce the text the "
                                 f"grammar requires (after {len(self.output_ids)} tokens)")
        return state == "open"

    def _hit_stop_string(self) -> bool:
        text = self.decode(self.output_ids)
        hits = [i for i in (text.find(s) for s in self.params.stop) if i >= 0]
        if hits:
            self.stop_text_at = min(hits)
            return True
        return False
