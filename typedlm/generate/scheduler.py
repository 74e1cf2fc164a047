"""Continuous batching: many sequences share one decode batch; rows join and leave between steps.

Per-row rules stay in :class:`Sequence` (``begin_step`` / ``select`` / ``append``) and every result
goes through :func:`finish_result`; this module only decides *which* rows run and feeds the model.

One ``step()``:
  1. drop cancelled rows (``finish_reason="abort"``), run queued exclusive calls (``call``)
  2. admit waiting rows up to ``max_batch``: prefill each alone, merge its KV into the batch
  3. every row: ``begin_step`` (a complete grammar finishes the row here, before any sampling)
     -> optional logprobs of the raw logits -> ``select`` -> ``append`` -> a ``token`` event
     -> ``more`` (forced tokens: jump-forward, end of a reasoning budget) -> a ``token`` event each
  4. evict finished rows (their matcher and KV columns are freed), send ``done`` events
  5. one batched forward of the tokens just appended (rows with forced tokens feed several; the
     shorter rows are right-padded and masked) -> each remaining row's next logits

``Scheduler.start()`` runs ``step()`` in one background thread; ``run_batch`` drives it inline
(tests, benchmarks). Events are delivered by calling ``Request.on_event`` on the engine thread.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..engine import Engine
from ..errors import TypedLMError
from .batch_cache import BatchKV
from .result import GenerationResult, finish_result
from .sequence import Sequence

log = logging.getLogger("typedlm.scheduler")


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
    decode_t0: float | None = None  # when the row joined the batch (end of its prefill)
    result: GenerationResult | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Scheduler:
    def __init__(self, engine: Engine, *, max_batch: int = 8, max_queue: int = 64):
        if max_batch < 1 or max_queue < 0:
            raise TypedLMError("max_batch must be >= 1 and max_queue >= 0")
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.kv = BatchKV(engine)
        self.running: list[Request] = []
        self.waiting: collections.deque[Request] = collections.deque()
        self._calls: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.peak_batch = 0  # most rows ever decoded together
        # prefill needs the last position's logits only (HF generate does the same): skips a
        # [prompt_len, vocab] lm_head product per admitted row
        self._prefill_kw = {"logits_to_keep": 1} if engine.keeps_logits else {}

    # -- client side (any thread) -----------------------------------------------------------------
    def submit(self, req: Request) -> Request:
        return self.submit_all([req])[0]

    def submit_all(self, reqs: list[Request], *, force: bool = False) -> list[Request]:
        """Queue all of ``reqs`` or none (``QueueFull``); ``force`` skips the bound (warm-up)."""
        with self._cond:
            if not force and len(self.waiting) + len(reqs) > self.max_queue:
                raise QueueFull(f"admission queue is full ({len(self.waiting)} of {self.max_queue} waiting)")
            self.waiting.extend(reqs)
            self._cond.notify()
        return reqs

    def cancel(self, req: Request) -> None:
        """Mark a request cancelled; the engine thread finishes it with "abort" before its next step."""
        with self._cond:
            req.cancelled = True
            self._cond.notify()

    def call(self, fn: Callable[..., Any], *args, **kwargs) -> concurrent.futures.Future:
        """Run ``fn`` on the engine thread between two steps (never during a forward pass)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._cond:
            self._calls.append((fut, fn, args, kwargs))
            self._cond.notify()
        return fut

    @property
    def queue_depth(self) -> int:
        return len(self.waiting)

    @property
    def batch_size(self) -> int:
        return len(self.running)

    # -- engine thread ----------------------------------------------------------------------------
    def start(self) -> "Scheduler":
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._loop, name="typedlm-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._stop or self.waiting or self.running or self._calls):
                    self._cond.wait()
                if self._stop:
                    break
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - a failed step ends its rows, never the server
                log.exception("decode step failed")
                self._fail_all(f"internal error: {type(e).__name__}: {e}")
        self._fail_all("server shutting down", reason="abort")

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self._calls)

    @torch.inference_mode()
    def step(self) -> None:
        self._drop_cancelled()
        self._run_calls()
        self._admit()
        if not self.running:
            return
        tokens: list[list[int]] = []  # per row: the sampled token + any forced after it
        for req in self.running:
            seq = req.seq
            if not seq.begin_step():
                tokens.append([])
                continue
            logits = req.next_logits
            event = TokenEvent(0)
            if req.logprobs is not None:
                lp = torch.log_softmax(logits, dim=-1)
            token = seq.select(logits)
            event.token = token
            if req.logprobs is not None:
                event.logprob = float(lp[token])
                if req.logprobs:
                    top = torch.topk(lp[: self.engine.tokenizer_vocab_size], req.logprobs)
                    event.top_logprobs = list(zip(top.indices.tolist(), top.values.tolist()))
            emitted = len(seq.output_ids)
            seq.append(token)
            if len(seq.output_ids) > emitted:  # stop ids and rejected tokens are not emitted
                req.on_event(event)
            forced = seq.more()
            for t in forced:
                req.on_event(TokenEvent(t, forced=True))
            tokens.append([token, *forced])
        keep = [i for i, r in enumerate(self.running) if not r.seq.finished]
        for r in self.running:
            if r.seq.finished:
                self._finish(r)
        self.running = [self.running[i] for i in keep]
        self.kv.keep(keep)
        if self.running:
            logits = self.kv.step([tokens[i] for i in keep])
            for i, r in enumerate(self.running):
                r.next_logits = logits[i]

    def _drop_cancelled(self) -> None:
        with self._cond:
            gone = [r for r in self.waiting if r.cancelled]
            for r in gone:
                self.waiting.remove(r)
        for r in gone:
            r.seq.finish("abort")
            self._finish(r)
        if any(r.cancelled for r in self.running):
            keep = [i for i, r in enumerate(self.running) if not r.cancelled]
            for r in self.running:
                if r.cancelled:
                    r.seq.finish("abort")
                    self._finish(r)
            self.running = [self.running[i] for i in keep]
            self.kv.keep(keep)

    def _run_calls(self) -> None:
        """Run the calls queued before this step; one queued meanwhile waits for the next step, so a
        caller that queues forward after forward (stepwise decide) lets a decode step run between them."""
        with self._cond:
            n = len(self._calls)
        for _ in range(n):
            with self._cond:
                fut, fn, args, kwargs = self._calls.popleft()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)

    def _admit(self) -> None:
        """Admit waiting rows into free slots. Rows of equal prompt length are prefilled together
        (no padding, so each row's KV is what a single-row prefill computes, up to GEMM shape)."""
        with self._cond:
            take = min(self.max_batch - len(self.running), len(self.waiting))
            admitted = [self.waiting.popleft() for _ in range(take)]
        groups: dict[int, list[Request]] = {}
        for req in admitted:
            groups.setdefault(len(req.seq.prompt_ids), []).append(req)
        for length, group in groups.items():
            t0 = time.perf_counter()
            try:
                ids = torch.tensor([r.seq.prompt_ids for r in group], device=self.engine.device)
                logits, cache = self.engine.forward(ids, **self._prefill_kw)
                last = logits[:, -1].float()
                self.kv.add(cache, length)
            except Exception as e:  # noqa: BLE001 - these rows fail, the batch goes on
                log.exception("prefill failed")
                for r in group:
                    r.seq.finish("error", f"internal error: prefill failed: {type(e).__name__}: {e}")
                    self._finish(r)
                continue
            now = time.perf_counter()
            for i, r in enumerate(group):
                r.next_logits = last[i]
                r.seq.timings.prefill = now - t0
                r.decode_t0 = now
            self.running.extend(group)
            self.peak_batch = max(self.peak_batch, len(self.running))

    def _finish(self, req: Request) -> None:
        seq = req.seq
        if req.decode_t0 is not None:
            seq.timings.decode = time.perf_counter() - req.decode_t0
        seq.grammar = None  # free the matcher now, not when the client lets go of the request
        req.next_logits = None
        req.result = finish_result(seq)
        req.done.set()
        try:
            req.on_event(DoneEvent(req.result))
        except Exception:  # noqa: BLE001 - a broken listener must not stop the batch
            log.exception("event listener failed")

    def _fail_all(self, message: str, reason: str = "error") -> None:
        with self._cond:
            reqs = list(self.running) + list(self.waiting)
            self.waiting.clear()
            calls = list(self._calls)
            self._calls.clear()
        self.running = []
        self.kv = BatchKV(self.engine)
        for r in reqs:
            r.seq.finish(reason, message if reason == "error" else None)
            self._finish(r)
        for fut, *_ in calls:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(TypedLMError(message))


def run_batch(engine: Engine, seqs: list[Sequence], *, max_batch: int = 8,
              logprobs: int | None = None) -> list[GenerationResult]:
    """Decode ``seqs`` with continuous batching on the calling thread; results in input order."""
    sched = Scheduler(engine, max_batch=max_batch, max_queue=len(seqs))
    reqs = [sched.submit(Request(seq=s, logprobs=logprobs)) for s in seqs]
    while sched.has_work():
        sched.step()
    return [r.result for r in reqs]
