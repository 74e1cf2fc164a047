"""Sequence: one request's decode state and its per-step rules (accept a token, forced tokens, finish).

The batch scheduler drives sequences through these calls, so the per-row rules live in one place
(the token itself is picked for the whole batch at once by :class:`sampler.BatchSampler`):

  ``begin_step()``        the grammar mask is filled; a complete grammar finishes the row (no sampling)
  ``accept(token)``       matcher accepts the token (rejection = internal error on the result);
                          a stop id or a stop string ends the row; returns :class:`Accepted`
  ``more()``              tokens accepted without sampling right after: the forced end of a
                          reasoning block past its budget
  ``draft()``             jump-forward: tokens of the text the grammar forces, fed with the sampled
                          one and accepted only as far as the row itself would choose them
  ``settle()``            after one batched mask fill: a grammar that is now complete, or
                          max_tokens, ends the row (``append`` = ``accept`` + ``settle``, one row alone)

A row with ``reasoning`` starts inside a ``<think>`` block: the grammar, stop strings and the
answer text begin after its end marker (:mod:`.reasoning`); the sampler skips its grammar mask.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..errors import TypedLMError
from ..grammar.controller import GrammarRow
from ..grammar.spec import Constraint
from .detokenize import Detokenizer
from .reasoning import ReasoningState
from .sampling import SamplingParams


@dataclass(frozen=True)
class Accepted:
    """What ``Sequence.accept`` did with a token."""

    emitted: bool  # appended to the output (stop ids and rejected tokens are not)
    goes_on: bool  # the row continues (``settle`` follows, after the mask of the new state is filled)


ENDED, EMITTED_ENDED, EMITTED = Accepted(False, False), Accepted(True, False), Accepted(True, True)


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
    jump: Any = None  # spec_decode.JumpForward when jump-forward is on
    constraint: Constraint | None = None
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "length" | "error" | "abort"
    error: str | None = None
    stop_text_at: int | None = None  # char offset where a stop string began
    truncation_fallbacks: int = 0
    forced_tokens: int = 0  # appended without sampling (jump-forward, forced end of reasoning)
    cached_tokens: int = 0  # prompt tokens read from the prefix cache at prefill
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
        return not self.masked or self._grammar_open()

    @property
    def _deferred(self) -> bool:
        """Inside the reasoning block: the grammar has not started yet."""
        return self.reasoning is not None and self.reasoning.active

    @property
    def masked(self) -> bool:
        """The grammar mask applies to this step's sampling (a grammar, and not deferred by reasoning)."""
        return self.grammar is not None and not self._deferred

    def append(self, token: int) -> None:
        """``accept`` then ``settle``: one row on its own (the batch scheduler calls the two halves,
        with ``more`` and one batched mask fill in between)."""
        if self.accept(token).goes_on:
            self.settle()

    def accept(self, token: int, *, forced: bool = False) -> Accepted:
        """The matcher accepts the token (unless reasoning defers the grammar); stop ids and stop
        strings end the row."""
        deferred = self._deferred
        if self.grammar is not None and not deferred and not self.grammar.accept(token):
            self.finish("error", f"internal error: grammar rejected {'forced' if forced else 'sampled'} token "
                                 f"{token} at step {len(self.output_ids)}")
            return ENDED
        if token in self.stop_ids:
            self.finish("stop")
            return ENDED
        self.output_ids.append(token)
        self.forced_tokens += forced
        if deferred:
            self.reasoning.observe(token, len(self.output_ids) - 1)
        elif self.detok is not None:
            self.detok.add(token)
            if self.detok.stop_at is not None:
                self.stop_text_at = self.detok.stop_at
                self.finish("stop")
                return EMITTED_ENDED
        return EMITTED

    def settle(self) -> None:
        """After the accepted tokens: a complete (or dead) grammar ends the row now, before any
        forward pass is spent on it; then ``max_tokens``."""
        if self.masked and not self._grammar_open():
            return  # next step's mask is computed now: a complete grammar ends the row before any forward
        if len(self.output_ids) >= self.params.max_tokens:
            self.finish("length")

    def settle_may_end(self) -> bool:
        """Could ``settle`` end the row? (max_tokens reached, or a masked grammar in an accepting state,
        where the next mask may allow only stop ids; a grammar that cannot end yet cannot be complete.)"""
        if len(self.output_ids) >= self.params.max_tokens:
            return True
        return bool(self.masked and self.grammar.can_end())

    def more(self) -> list[int]:
        """Accept the tokens that follow without sampling (after ``accept`` of the sampled one,
        before ``settle``): the forced end of a reasoning block past its budget. Returns those
        actually appended."""
        if self.finished or not self._deferred:
            return []
        out = []
        for t in self.reasoning.forced()[: self.params.max_tokens - len(self.output_ids)]:
            took = self.accept(t, forced=True)
            if took.emitted:
                out.append(t)
            if not took.goes_on:
                break
        return out

    def draft(self) -> list[int]:
        """Jump-forward: the canonical tokens of the text the grammar forces next, *not* accepted.
        The next forward feeds them after the sampled token; the scheduler then keeps the prefix the
        row itself would have chosen (``BatchSampler.verify``) and rolls the KV back over the rest."""
        if self.finished or self.jump is None or not self.masked:
            return []
        ids = self.jump.tokens(self)[: self.params.max_tokens - len(self.output_ids)]
        self.jump.drafted += len(ids)
        return ids

    def _grammar_open(self) -> bool:
        self.grammar.fill()
        state = self.grammar.state()
        if state == "complete":
            self.finish("stop")
        elif state == "dead":
            self.finish("error", "grammar allows no next token: the tokenizer cannot produce the text the "
                                 f"grammar requires (after {len(self.output_ids)} tokens)")
        return state == "open"


def fit(seq: Sequence, max_len: int) -> None:
    """Like the model's context in ``build_sequence``: a prompt must fit the KV, and ``max_tokens``
    is cut to the room left (the row then ends with ``length``)."""
    if len(seq.prompt_ids) >= max_len:
        raise TypedLMError(f"prompt has {len(seq.prompt_ids)} tokens; the KV holds {max_len} (TYPEDLM_KV_LEN)")
    room = max_len - len(seq.prompt_ids)
    if seq.params.max_tokens > room:
        seq.params = dataclasses.replace(seq.params, max_tokens=room)
