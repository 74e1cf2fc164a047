"""Sequence: one request's decode state and its per-step rules (select a token, append it, finish).

The batch scheduler drives sequences through these calls, so the per-row rules live in one place
(the token itself is picked for the whole batch at once by :class:`sampling.BatchSampler`):

  ``begin_step()``        the grammar mask is filled; a complete grammar finishes the row (no sampling)
  ``append(token)``       = ``accept`` (matcher accepts the sampled token, rejection = internal error
                          on the result; stop id / stop string end the row) + ``settle`` (a grammar
                          that is now complete, or max_tokens, ends the row)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..grammar.controller import GrammarRow
from ..grammar.spec import Constraint
from .sampling import SamplingParams


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

    def append(self, token: int) -> None:
        """``accept`` then ``settle``: one row on its own (the batch scheduler calls the two halves,
        with one batched mask fill in between)."""
        if self.accept(token):
            self.settle()

    def accept(self, token: int) -> bool:
        """The matcher accepts the sampled token; stop ids and stop strings end the row. Returns
        True when the row goes on (``settle`` must follow, after the mask of the new state is filled)."""
        if self.grammar is not None and not self.grammar.accept(token):
            self.finish("error", f"internal error: grammar rejected sampled token {token} "
                                 f"at step {len(self.output_ids)}")
            return False
        if token in self.stop_ids:
            self.finish("stop")
            return False
        self.output_ids.append(token)
        if self.params.stop and self._hit_stop_string():
            self.finish("stop")
            return False
        return True

    def settle(self) -> None:
        """After the accepted token: a complete (or dead) grammar ends the row now, before any
        forward pass is spent on it; then ``max_tokens``."""
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
