"""What a scheduler holds per request and per step: :class:`Request` (one sequence and its slot), the events it
sends (:class:`TokenEvent`, :class:`DoneEvent`) and :class:`StepPlan` (the rows that sample in a step, and the
decision work it carries)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..errors import TypedLMError
from .result import GenerationResult
from .sequence import Sequence


class QueueFull(TypedLMError):
    """The admission queue is full; retry later."""


@dataclass
class TokenEvent:
    token: int
    logprob: float | None = None
    top_logprobs: list[tuple[int, float]] = field(default_factory=list)
    forced: bool = False  # appended without sampling (no logprob)


@dataclass
class DoneEvent:
    result: GenerationResult


@dataclass(eq=False)
class Request:
    """One sequence in the scheduler. ``on_event`` is called on the engine thread."""

    seq: Sequence
    on_event: Callable[[Any], None] = lambda e: None
    logprobs: int | None = None  # None: no logprobs; k >= 0: chosen token + top-k alternatives
    cancelled: bool = False
    next_logits: torch.Tensor | None = None
    slot: int = -1
    feed: list[int] = field(default_factory=list)  # tokens the next forward feeds (sampled + forced + draft)
    draft: list[int] = field(default_factory=list)  # jump-forward draft at the end of ``feed``, to verify
    decode_t0: float | None = None  # when the row joined the batch (end of its prefill)
    result: GenerationResult | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class StepPlan:
    """The rows that sample in this step (admitted, drafts verified, masks ready) and the decision work the step
    runs after their forward: (item, tokens) pairs (:meth:`.work.WorkQueue.take`)."""

    rows: list[Request]
    work: list = field(default_factory=list)

    @property
    def overlap(self) -> bool:
        """After ``accept``: may the next forward be queued before ``postprocess``? (see the module docstring)"""
        return not all(r.seq.settle_may_end() for r in self.rows)
