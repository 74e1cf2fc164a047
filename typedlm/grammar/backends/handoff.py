"""The default engine for JSON constraints: a fast first mask *and* fast decoding. A new schema starts at once
on llguidance (a grammar in milliseconds, each mask computed when asked) while xgrammar compiles the same
constraint in the background (a small pool); once it is ready, each row replays the tokens it accepted into
an xgrammar matcher and moves to it (precomputed masks: decode speed). Where xgrammar cannot compile the
constraint (its error, the EBNF size cap), rows stay on llguidance; where llguidance cannot read it
exactly, the compile waits for xgrammar. Rows never know: the move happens inside :class:`HandoffState`."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence

import torch

from ..spec import Constraint
from .base import NotForEngine

NAME = "handoff"
POOL_THREADS = 2  # background xgrammar compiles at once (each uses xgrammar's own threads too)


class HandoffState:
    """One row: an llguidance state until the background compile is ready, then an xgrammar one that has
    replayed the same history (text and tokens). ``filler`` is where a move happens (the batch groups rows
    by filler, then fills their :attr:`base`), and :meth:`fill_mask`; nothing else moves the row."""

    def __init__(self, grammar: "HandoffCompiled", inner):
        self._grammar, self.inner = grammar, inner
        self.stop_ids = inner.stop_ids
        self._history: list = []  # ("text", str) / ("tokens", [int]) since the start, for the replay
        self._broken = False  # a step was refused: the state is unusable, never moved
        self.moved = grammar.ready() is not None

    @property
    def engine(self) -> str:
        """The engine this row runs on now (reports and tests)."""
        return self.inner.base.__class__.__module__.rsplit(".", 1)[-1]

    def _move(self) -> None:
        if self.moved or self._broken:
            return
        target = self._grammar.ready()
        if target is None:
            return
        state = target.new_state()
        for kind, item in self._history:
            ok = state.accept_text(item) if kind == "text" else state.accept(item)
            if not ok:  # the engines disagree on this history: stay (the differential tests keep this at never)
                self._grammar.disagreements += 1
                self.moved = True
                return
        self.inner, self.moved, self._history = state, True, []

    @property
    def filler(self):
        self._move()
        return self.inner.filler

    @property
    def base(self):
        return self.inner.base

    def restrict(self, bitmask: torch.Tensor, row: int) -> bool:
        return self.inner.restrict(bitmask, row)

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        self._move()
        self.inner.fill_mask(bitmask, row)

    def accept(self, tokens: Sequence[int]) -> bool:
        ok = self.inner.accept(tokens)
        if not self.moved:
            if ok:
                self._history.append(("tokens", [int(t) for t in tokens]))
            else:
                self._broken = True
        return ok

    def accept_text(self, text: str) -> bool:
        ok = self.inner.accept_text(text)
        if not self.moved:
            if ok:
                self._history.append(("text", text))
            else:
                self._broken = True
        return ok

    def rollback(self, n: int) -> None:
        self.inner.rollback(n)
        if not self.moved:
            while n > 0:
                kind, item = self._history[-1]
                if kind == "text":
                    raise ValueError("cannot roll back past text accepted with accept_text")
                take = min(n, len(item))
                del item[len(item) - take:]
                if not item:
                    self._history.pop()
                n -= take

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def can_end(self) -> bool:
        return self.inner.can_end()

    def jump_string(self) -> str:
        return self.inner.jump_string()


class HandoffCompiled:
    """llguidance's compiled grammar (``first``) and the background xgrammar compile (``later``, a future;
    None: xgrammar is not tried). New rows start on xgrammar once it is ready."""

    engine = NAME

    def __init__(self, first, later: Future | None):
        self.first, self.later = first, later
        self.disagreements = 0  # rows whose history xgrammar refused on the move (kept on llguidance)

    def ready(self):
        """xgrammar's compiled grammar when the background compile has succeeded, else None."""
        if self.later is None or not self.later.done() or self.later.exception() is not None:
            return None
        return self.later.result()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` s for the background compile; True when rows will move (benches, tests)."""
        if self.later is None:
            return False
        try:
            self.later.result(timeout)
        except Exception:  # noqa: BLE001 - a failed or unfinished compile: rows stay on llguidance
            return False
        return True

    def new_state(self) -> HandoffState:
        ready = self.ready()
        return HandoffState(self, ready.new_state() if ready is not None else self.first.new_state())


class HandoffBackend:
    """llguidance now, xgrammar in the background (``first``, ``later``: those backends; ``first`` None when
    llguidance is not installed: xgrammar alone). ``automata`` is None: :meth:`compile` gets ``prepare``, a
    function of ``automata`` giving the core form each engine reads."""

    name = NAME
    kinds = ("json_schema", "json_object")
    automata = None

    def __init__(self, first, later, *, threads: int = POOL_THREADS):
        self.first, self.later = first, later
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="typedlm-handoff")
        self._lock = threading.Lock()
        self._pending: set[Future] = set()  # background compiles not yet finished

    def flush(self) -> None:
        """Wait for the background compiles under way, then for xgrammar's disk writes."""
        with self._lock:
            pending = list(self._pending)
        for f in pending:
            try:
                f.result()
            except Exception:  # noqa: BLE001 - a failed compile: rows stay on llguidance
                pass
        self.later.flush()

    def compile(self, c: Constraint, prepare: Callable[[bool], Any]):
        """A :class:`HandoffCompiled`; xgrammar's own compiled grammar where it is already cached (no
        llguidance work), or where llguidance cannot read ``c`` exactly (waits for it)."""
        if self.first is None or self.later.cached(c):
            return self.later.compile(c, prepare(True))
        try:
            first = self.first.compile(c, prepare(False))
        except NotForEngine:
            return self.later.compile(c, prepare(True))
        later = self._pool.submit(self._later, c, prepare)  # after llguidance's build: no GIL contention with it
        with self._lock:
            self._pending.add(later)
        later.add_done_callback(self._done)
        return HandoffCompiled(first, later)

    def _done(self, f: Future) -> None:
        with self._lock:
            self._pending.discard(f)

    def _later(self, c: Constraint, prepare: Callable[[bool], Any]):
        return self.later.compile(c, prepare(True))


def settle(compiled, timeout: float) -> tuple[str, float, bool]:
    """Wait up to ``timeout`` s for ``compiled``'s background compile, if it has one (benches, tests): (the
    engine a new row of it starts on, the seconds waited, whether the compile still runs)."""
    grammar = compiled
    while not hasattr(grammar, "later") and hasattr(grammar, "inner"):  # a wrapper (the unique-array guard)
        grammar = grammar.inner
    t0 = time.perf_counter()
    running = False
    if isinstance(grammar, HandoffCompiled):
        grammar.wait(timeout)
        running = grammar.later is not None and not grammar.later.done()
        state = grammar.new_state().inner
    else:
        state = compiled.new_state()
    return state.base.__class__.__module__.rsplit(".", 1)[-1], time.perf_counter() - t0, running
