"""Continuous batching: many sequences share one decode batch; rows join and leave between steps.

Per-row rules stay in :class:`Sequence` (``begin_step`` / ``accept`` / ``more`` / ``settle``); every result
goes through :func:`finish_result`; the model runs only in the runner (:mod:`typedlm.runner`); draft
verification is :mod:`.spec_decode`. One ``step()``:

  1. ``schedule()`` -> :class:`StepPlan`: cancelled rows end (``abort``) and cancelled decisions' work
     leaves, queued exclusive calls run (``call``: warm-up), waiting rows are admitted into free KV slots and
     prefilled (equal lengths together), drafted rows verify their drafts, each row's mask is ready
     (``begin_step``: a complete grammar ends the row before any sampling); the plan is the rows that sample
     now and the decision work that fills the step's token budget (:mod:`.work`).
  2. ``pick`` -> one ``BatchSampler`` pass for the whole plan: the ids on the device, their copy to the host
     queued (logprobs of the raw logits when asked for); ``collect`` waits for that copy alone.
  3. ``accept``: per row the token is accepted (stop ids / strings end rows), a ``token`` event goes out,
     forced tokens follow (``more``), a jump-forward draft is made; together they are the row's next ``feed``.
  4. ``execute`` -> one ``runner.run`` of every running row's feed; ``hand_out`` gives each row its logits.
  5. ``settle``: one batched mask fill of the new grammar states, per row ``settle`` (a complete grammar or
     ``max_tokens`` ends it), then the step's one eviction (slot + matcher freed, ``done``).
  6. the plan's decision work (:mod:`.work`, :mod:`.scheduled`): prefill chunks and scoring passes after the
     decode forward, on the same thread; with ``mixed_step`` the chunk rides in that forward (``execute``).

Two orders of 3-5, chosen at construction (``overlap_schedule``): ``_serial`` (accept, settle, execute) and
``_overlapped`` (default): ``execute`` needs only the tokens just accepted, so when a row that settling cannot
end exists (``StepPlan.overlap``) it is queued before ``settle`` and the host fills masks while the device runs
it (a row the fill ends leaves its share unused); else it runs after ``settle``. **Device feed** (the static
slots): when every next feed is just the sampled token, the next forward is queued on the ids still on the
device *before* ``collect``: no host sync between two forwards (vLLM's and SGLang's async scheduling).

``start()`` runs ``step()`` in a background thread; ``run_batch`` inline; events: ``Request.on_event``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable

import torch

from ..engine import Engine
from ..errors import TypedLMError
from .requests import DoneEvent, QueueFull, Request, StepPlan, TokenEvent
from .result import GenerationResult, finish_result
from .sampler import BatchSampler
from .sequence import Sequence, fit
from .spec_decode import verify_drafts
from .work import Work, WorkQueue

log = logging.getLogger("typedlm.scheduler")


class Scheduler:
    def __init__(self, engine: Engine, *, max_batch: int = 8, max_queue: int = 64):
        if max_batch < 1 or max_queue < 0:
            raise TypedLMError("max_batch must be >= 1 and max_queue >= 0")
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.runner = engine.runner
        self.kv = self.runner.decode_cache(max_batch)  # a KVCache (typedlm.runner.contract)
        # a row keeps its slot (KV, bitmask, sampling params) for life; the KV hands them out
        self.sampler = _sampler_class(engine.backend)(max_batch=self.kv.capacity, vocab_size=engine.model_vocab_size,
                                              tokenizer_vocab_size=engine.tokenizer_vocab_size, device=engine.device)
        self.running: list[Request] = []
        self.waiting: collections.deque[Request] = collections.deque()
        self._calls: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.peak_batch = 0  # most rows ever decoded together
        self.work = WorkQueue(engine.settings.step_tokens, engine.settings.step_forwards)  # decisions' forwards (.work, .scheduled)
        self._advance = self._overlapped if engine.settings.overlap_schedule else self._serial
        self._mixed, self._ride = engine.settings.mixed_step and self.kv.device_feed, None  # runner/mixed.py

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

    def submit_work(self, work: Work) -> Work:
        """Queue a decision's forward; a step runs it within its token budget (:mod:`.work`)."""
        with self._cond:
            self.work.push(work)
            self._cond.notify()
        return work

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
                while not (self._stop or self.has_work()):
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
        return bool(self.waiting or self.running or self._calls or len(self.work))

    @torch.inference_mode()
    def step(self) -> None:
        """One engine step: the plan, one sampling pass over its rows, the forward and the update in the order
        chosen at construction (``_serial`` or ``_overlapped``, module docstring), then the plan's decision work."""
        plan = self.schedule()
        if plan.rows:
            self._advance(plan, self.pick(plan))
        self.work.run(plan.work)

    def _serial(self, plan: StepPlan, ids: torch.Tensor) -> None:
        """Accept, settle, evict; then one forward of the rows that go on (nothing overlaps)."""
        self.accept(plan, *self.collect(plan))
        self.settle(plan)
        self.hand_out(self.execute())

    def _overlapped(self, plan: StepPlan, ids: torch.Tensor) -> None:
        """The next forward queued as early as the plan allows (on the device ids before the host reads them, else
        right after ``accept``) and the host's mask fill while it runs; a forward no row can use never runs."""
        ahead = self.execute(ids) if self._device_feed(plan) else None
        self.accept(plan, *self.collect(plan))
        if ahead is None and plan.overlap:
            ahead = self.execute()
        self.settle(plan)
        self.hand_out(ahead if ahead is not None else self.execute())

    def schedule(self) -> StepPlan:
        self._ride = None
        self._drop_cancelled()
        self._run_calls()
        self._admit()
        self._verify()
        if not self.running:
            return StepPlan([], self.work.take(0))
        self.sampler.fill([r.seq for r in self.running])  # rows just admitted
        plan = StepPlan([r for r in self.running if r.seq.begin_step()])
        if not plan.rows:
            self._evict()
        plan.work = self.work.take(len(self.running))
        self._ride = self.work.ride(plan.work) if self._mixed and plan.rows else None
        return plan

    def pick(self, plan: StepPlan) -> torch.Tensor:
        """One batched pipeline for every sampling row -> the ids on the device; their copy to the host is
        queued (``collect`` reads it), with the raw logits' logprobs when a row asks for them."""
        seqs = [r.seq for r in plan.rows]
        logits = self.sampler.stack([r.next_logits for r in plan.rows])
        want = [i for i, r in enumerate(plan.rows) if r.logprobs is not None]
        self._lp = self.sampler.log_softmax(logits, want) if want else None  # of the raw logits
        ids = self.sampler.sample(logits, seqs, [r.slot for r in plan.rows])
        self.sampler.send(ids)
        return ids

    def collect(self, plan: StepPlan) -> tuple[list[int], list[TokenEvent]]:
        """Wait for ``pick``'s host copy alone -> (tokens, their events)."""
        tokens = self.sampler.receive([r.seq for r in plan.rows])
        events = [TokenEvent(t) for t in tokens]
        want = [i for i, r in enumerate(plan.rows) if r.logprobs is not None]
        if want:  # opt-in: one more transfer
            got = self.sampler.logprobs(self._lp, [tokens[i] for i in want], [plan.rows[i].logprobs for i in want],
                                        self.engine.tokenizer_vocab_size)
            for i, (logprob, top) in zip(want, got):
                events[i].logprob, events[i].top_logprobs = logprob, top
        return tokens, events

    def _device_feed(self, plan: StepPlan) -> bool:
        """May the next forward start from the sampled ids before the host reads them? When the cache takes
        device ids, every row's next feed is its sampled token alone (no forced tokens, drafts or logprobs)
        and some row may go on after it; a row the token then ends leaves with its share of that forward unused."""
        return self.kv.device_feed and all(
            r.logprobs is None and r.seq.jump is None and r.seq.reasoning is None for r in plan.rows) and any(
            len(r.seq.output_ids) + 1 < r.seq.params.max_tokens for r in plan.rows)

    def accept(self, plan: StepPlan, tokens: list[int], events: list[TokenEvent]) -> None:
        """Each row takes its token (stop ids / strings end rows here; ``settle`` follows after the mask
        fill), then its forced tokens and its draft: the row's next feed."""
        for r, t, event in zip(plan.rows, tokens, events):
            seq = r.seq
            if seq.accept(t).emitted:  # stop ids and rejected tokens are not emitted
                r.on_event(event)
            forced = seq.more()
            for f in forced:
                r.on_event(TokenEvent(f, forced=True))
            self.sampler.saw(r.slot, seq, forced)
            r.draft = [] if forced else seq.draft()
            r.feed = [t, *forced, *r.draft]

    def execute(self, ids: torch.Tensor | None = None) -> tuple[torch.Tensor, list[Request]] | None:
        """One forward of every running row that goes on (``runner.run`` of its feed) -> (logits in row order,
        those rows): ``[B, V]``, or ``[B, k, V]`` at every fed position when a row verifies a draft. ``ids``: the
        feeds on the device (``_device_feed``). Finished rows are left out here, evicted in ``settle``."""
        rows = [r for r in self.running if not r.seq.finished]
        if not rows:
            return None
        ride, self._ride = self._ride, None  # mixed_step: the plan's chunk rides this forward (static slots only)
        kw, slots = ({} if ride is None else {"ride": ride}), [r.slot for r in rows]
        out = self.runner.step_ids(self.kv, ids, slots, **kw) if ids is not None else self.runner.run(
            self.kv, [r.feed for r in rows], slots, every=any(r.draft for r in rows), **kw)
        if ride is not None:
            self.work.rode()
        return out, rows

    def settle(self, plan: StepPlan) -> None:
        """The next masks of every grammar row in one batched fill, then each row settles; finished rows go (the
        step's one eviction)."""
        seqs = [r.seq for r in plan.rows]
        self.sampler.fill(seqs)
        for seq in seqs:
            if not seq.finished:
                seq.settle()
        self._evict()

    def hand_out(self, forward: tuple[torch.Tensor, list[Request]] | None) -> None:
        """Each running row's logits for its next step (a drafted row: those that predict its draft and after)."""
        if forward is None or not self.running:
            return
        self.sampler.upload()
        logits, rows = forward
        at = {id(r): i for i, r in enumerate(rows)}
        for r in self.running:  # rows of the forward that settling ended have been evicted
            row = logits[at[id(r)]]
            if row.ndim == 2:
                row = row[len(r.feed) - len(r.draft) - 1: len(r.feed)] if r.draft else row[len(r.feed) - 1]
            r.next_logits = row

    def _verify(self) -> None:
        """Jump-forward drafts fed by the last forward are verified (:func:`.spec_decode.verify_drafts`);
        the KV forgets each row's rejected tokens."""
        drop = verify_drafts(self.running, self.sampler, lambda r, t: r.on_event(TokenEvent(t, forced=True)))
        if any(drop):
            self.kv.truncate(drop, [r.slot for r in self.running])
        self._evict()

    def _evict(self) -> None:
        done = [r for r in self.running if r.seq.finished]
        if done:
            for r in done:
                self._finish(r)
            self.running = [r for r in self.running if not r.seq.finished]

    def _drop_cancelled(self) -> None:
        with self._cond:
            gone = [r for r in self.waiting if r.cancelled]
            for r in gone:
                self.waiting.remove(r)
        for r in gone:
            r.seq.finish("abort")
            self._finish(r)
        for r in self.running:
            if r.cancelled:
                r.seq.finish("abort")
        self._evict()
        self.work.drop_cancelled()

    def _run_calls(self) -> None:  # the calls queued before this step; one queued meanwhile waits for the next
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
            take = min(self.max_batch - len(self.running), len(self.waiting), self.kv.free_slots)
            admitted = [self.waiting.popleft() for _ in range(take)]
        groups: dict[int, list[Request]] = {}
        for req in admitted:
            groups.setdefault(len(req.seq.prompt_ids), []).append(req)
        for length, group in groups.items():
            t0 = time.perf_counter()
            try:
                for r in group:
                    fit(r.seq, self.kv.max_len)
                    r.slot = self.kv.acquire()
                last = self.runner.prefill(self.kv, [r.seq.prompt_ids for r in group], [r.slot for r in group])
            except Exception as e:  # noqa: BLE001 - these rows fail, the batch goes on
                log.exception("prefill failed")
                for r in group:
                    r.seq.finish("error", str(e) if isinstance(e, TypedLMError)
                                 else f"internal error: prefill failed: {type(e).__name__}: {e}")
                    self._finish(r)
                continue
            now = time.perf_counter()
            for i, r in enumerate(group):
                self.sampler.admit(r.slot, r.seq)
                r.seq.cached_tokens = self.kv.cached_tokens(r.slot)
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
        if req.slot >= 0:
            self.kv.release(req.slot)  # evict = mark the slot free: no KV is moved
            req.slot = -1
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
        for r in reqs:
            r.seq.finish(reason, message if reason == "error" else None)
            self._finish(r)
        for fut, *_ in calls:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(TypedLMError(message))
        self.work.fail_all(message)


def _sampler_class(backend: str) -> type[BatchSampler]:
    """The logits pipeline on the backend's arrays (MLX: :mod:`.mlx_sampler`, imported only there: optional extra)."""
    if backend == "mlx":
        from .mlx_sampler import MLXSampler  # optional extra: mlx (the module imports mlx)

        return MLXSampler
    return BatchSampler


def run_batch(engine: Engine, seqs: list[Sequence], *, max_batch: int = 8,
              logprobs: int | None = None) -> list[GenerationResult]:
    """Decode ``seqs`` with continuous batching on the calling thread; results in input order."""
    sched = Scheduler(engine, max_batch=max_batch, max_queue=len(seqs))
    reqs = [sched.submit(Request(seq=s, logprobs=logprobs)) for s in seqs]
    while sched.has_work():
        sched.step()
    return [r.result for r in reqs]
