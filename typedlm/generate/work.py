"""Decision work as scheduler items: each forward a decision makes (:class:`~.scheduled.ScheduledRunner`) is a
:class:`Work` with a token cost, queued here and run by the engine thread inside a step, after that step's decode
forward (same thread, same CUDA stream).

**The budget** (``Settings.step_tokens``, ``Settings.step_forwards``, :meth:`WorkQueue.take`): beside decode
rows a step carries at most ``step_tokens`` tokens and ``step_forwards`` work forwards, and only when the step
before carried none, so no stream waits on work two steps running (on CUDA a decode step is ~5 ms and a graphed
chunk ~7 ms: issue 34). Decode rows come first (one token each); work fills the rest in arrival order: a chunked
job (a causal prompt prefill continuing one KV cache) gets a chunk cut to the room left, a whole job (a scoring
pass) goes if it fits. Fairness: while work waits, every other step carries at least one chunk (at least
:data:`MIN_CHUNK` tokens, or the first whole job), so a burst of streams cannot starve decisions; the budget keeps
a long ``decide_many`` from starving streams. With no decode row running, jobs go whole (up to the budget, at
least one), every step.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextvars
import threading
from dataclasses import dataclass, field
from typing import Any

from ..errors import TypedLMError
from ..runner.contract import Job

MIN_CHUNK = 32  # tokens the step's one forced chunk gets when decode rows fill the budget


@dataclass(eq=False)
class Work:
    """One job of a decision (``owner``: its runner, whose ``cancelled`` drops it) and the future it answers; the job
    runs in a copy of the submitting thread's context (its prefix-cache tally sees the lookups)."""

    job: Job
    owner: Any
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    context: contextvars.Context = field(default_factory=contextvars.copy_context)

    @property
    def tokens(self) -> int:
        return self.job.left


class WorkQueue:
    """Work waiting for steps, in arrival order; a chunked job keeps its place until its last chunk."""

    def __init__(self, step_tokens: int, step_forwards: int = 1):
        if step_tokens < 1 or step_forwards < 1:
            raise TypedLMError(f"step_tokens and step_forwards must be >= 1, not {step_tokens}, {step_forwards}")
        self.step_tokens, self.step_forwards = step_tokens, step_forwards
        self._carried = False  # the last step beside decode rows carried work
        self._riding: tuple[Work, object] | None = None  # the step's chunk staged to ride its decode forward
        self._items: collections.deque[Work] = collections.deque()
        self._lock = threading.Lock()
        self.chunks = 0  # work forwards run (tests, bench)

    def __len__(self) -> int:
        return len(self._items)

    def push(self, work: Work) -> None:
        with self._lock:
            self._items.append(work)

    def take(self, decode_tokens: int) -> list[tuple[Work, int]]:
        """This step's work: (item, tokens) pairs within the budget left after ``decode_tokens`` (module
        docstring)."""
        with self._lock:
            items = list(self._items)
        if decode_tokens:
            rest, self._carried = self._carried, bool(items) and not self._carried
            if rest:
                return []
            items = items[:self.step_forwards]
        room, out = self.step_tokens - decode_tokens, []
        for w in items:
            want = w.tokens
            if not decode_tokens:
                n = want if not out or want <= room else 0
            elif w.job.chunked:
                n = min(want, room) if room > 0 else 0 if out else min(want, MIN_CHUNK)
            else:
                n = want if want <= room or not out else 0
            if n <= 0:
                break
            out.append((w, n))
            room -= n
        return out

    def ride(self, chunks: list[tuple[Work, int]]):
        """``mixed_step``: the step's one chunk (a chunked job's) as a ride for its decode forward
        (:mod:`typedlm.runner.mixed`), or None; the forward that carries it hands it back with :meth:`rode`."""
        self._riding = None
        if len(chunks) != 1 or not chunks[0][0].job.chunked or chunks[0][0].future.done():
            return None
        w, n = chunks[0]
        try:
            ride = w.context.run(w.job.ride, n)
        except BaseException:  # noqa: BLE001 - the job runs its chunk itself in ``run`` and meets the error there
            return None
        self._riding = (w, ride) if ride is not None else None
        return ride

    def rode(self) -> None:
        """The staged ride's forward ran: its job takes the outputs (or, not carried, runs its chunk in ``run``)."""
        w, ride = self._riding
        if ride.out is not None:
            self._riding = (w, None)
            self._done(w, lambda: w.context.run(w.job.rode, ride))

    def run(self, chunks: list[tuple[Work, int]]) -> None:
        """Each item's chunk (one that rode the decode forward: already done); a finished item answers its future
        and leaves, a failed one too (with the error)."""
        rode = self._riding[0] if self._riding is not None and self._riding[1] is None else None
        self._riding = None
        for w, n in chunks:
            if w is rode or w.future.done():  # carried by the forward; cancelled meanwhile
                continue
            self._done(w, lambda: w.context.run(w.job.advance, n))

    def _done(self, w: Work, chunk) -> None:
        self.chunks += 1
        try:
            done = chunk()
        except BaseException as e:  # noqa: BLE001 - handed to the decision's thread
            self._leave(w)
            w.future.set_exception(e)
            return
        if done:
            self._leave(w)
            w.future.set_result(w.job.result)

    def _leave(self, w: Work) -> None:
        with self._lock:
            if w in self._items:
                self._items.remove(w)

    def drop_cancelled(self) -> None:
        """Items of cancelled owners leave; their futures raise."""
        with self._lock:
            gone = [w for w in self._items if w.owner.cancelled]
            for w in gone:
                self._items.remove(w)
        for w in gone:
            if not w.future.done():
                w.future.set_exception(TypedLMError("decision cancelled"))

    def fail_all(self, message: str) -> None:
        with self._lock:
            gone = list(self._items)
            self._items.clear()
        for w in gone:
            if not w.future.done():
                w.future.set_exception(TypedLMError(message))
