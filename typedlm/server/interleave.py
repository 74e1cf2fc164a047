"""Decide beside generation: a ``/v1/decide`` request no longer stalls the decode streams.

Before, the whole decision ran as one block on the engine thread (``run_exclusive``): every running
stream waited for it (10.9 s seen on the CPU). Now the decision runs on a worker thread with a
:class:`SteppedEngine` in place of the Engine: each of its forwards is handed to the engine thread as one
queued call (``Scheduler.call``), which runs between two decode steps. While streams are decoding, a
prefill is cut into pieces that continue one KV cache, each sized from measurements to cost about one decode
step (:class:`SteppedEngine`). Rows are always scored ``row_chunk`` rows per pass (default 1): a stream may
arrive while they are scored, and a pass cannot be cut later. With no stream running, a prefill goes whole.

Results are the same decisions: chunked prefill computes the same cache, and row chunking is the
``max_rows`` path whose parity with one pass is pinned by ``test_parity_batched_vs_one_row_at_a_time``.
Measured with ``typedlm bench itl`` (default model, CPU): p99 inter-token latency of 4 streams beside decide
traffic 2.18x the streams alone (43.7x with the exclusive block); on the CPU a forward of a few tokens costs
about a decode step (every forward reads all weights), which bounds this design near 2x there.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import torch

from ..engine import Engine
from ..generate.scheduler import Scheduler

class SteppedEngine:
    """The Engine, except that ``forward`` runs on the scheduler's engine thread between decode steps.

    Prefill chunks are sized from measurements: ``step_s`` (EMA of how long a queued forward waits for its
    step, i.e. about one decode step) and ``token_s`` (EMA of forward seconds per token); a chunk gets
    ``STEP_SHARE * step_s / token_s`` tokens (at least 1, at most ``max_chunk``), so a decode step plus one
    decide chunk stays well under 2 decode steps (0.8 measured 2.3x p99 ITL on the CPU: the estimate lags a
    growing cache). The first chunk, before any measurement, is ``FIRST_CHUNK``."""

    FIRST_CHUNK = 4
    STEP_SHARE = 0.5
    EMA = 0.3

    def __init__(self, engine: Engine, scheduler: Scheduler, *, max_chunk: int):
        self._engine = engine
        self._scheduler = scheduler
        self.max_chunk = max_chunk
        self.forwards = 0  # queued calls made (tests, bench)
        self.step_s: float | None = None
        self.token_s: float | None = None

    def __getattr__(self, name: str) -> Any:  # everything but forward is the Engine's own
        return getattr(self._engine, name)

    def busy(self) -> bool:
        """Are decode streams running or waiting? (then forwards are cut into small pieces)"""
        return bool(self._scheduler.batch_size or self._scheduler.queue_depth)

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.EMA) * old + self.EMA * new

    def _call(self, input_ids, *args, **kwargs):
        took = {}

        def timed():
            t = time.perf_counter()
            out = self._engine.forward(input_ids, *args, **kwargs)
            took["s"] = time.perf_counter() - t
            return out

        self.forwards += 1
        t0 = time.perf_counter()
        out = self._scheduler.call(timed).result()
        if "s" in took:
            self.step_s = self._ema(self.step_s, max(0.0, time.perf_counter() - t0 - took["s"]))
            self.token_s = self._ema(self.token_s, took["s"] / max(1, input_ids.shape[-1]))
        return out

    def chunk(self) -> int:
        if not self.step_s or not self.token_s:
            return min(self.FIRST_CHUNK, self.max_chunk)
        return max(1, min(self.max_chunk, int(self.STEP_SHARE * self.step_s / self.token_s)))

    def forward(self, input_ids: torch.Tensor, cache=None, **kwargs):
        n = input_ids.shape[-1]
        plain_prefill = cache is None and input_ids.shape[0] == 1 and set(kwargs) <= {"logits_to_keep"}
        if not plain_prefill or not self.busy():
            return self._call(input_ids, cache, **kwargs)
        # a causal prompt: the same KV cache, built a chunk at a time (positions follow the cache)
        start, logits = 0, None
        while start < n:
            size = self.chunk() if self.busy() else n - start
            last = start + size >= n
            keep = kwargs if last else {k: 1 for k in kwargs}  # logits_to_keep: only the last chunk's matter
            logits, cache = self._call(input_ids[:, start:start + size], cache, **keep)
            start += size
        return logits, cache


async def run_stepwise(engine: Engine, scheduler: Scheduler, fn: Callable[..., Any], *args, prefill_chunk: int,
                       row_chunk: int, **kwargs) -> Any:
    """``fn(*args, engine=<SteppedEngine>, **kwargs)`` on a worker thread; rows are scored ``row_chunk`` per
    pass (``max_rows``) and, with streams decoding, the prompt is prefilled in measured chunks of at most
    ``prefill_chunk`` tokens (``ServerConfig.decide_chunk_rows`` / ``decide_chunk_tokens``)."""
    stepped = SteppedEngine(engine, scheduler, max_chunk=prefill_chunk)
    if kwargs.get("max_rows") is None:  # always: a stream may arrive while the rows are scored
        kwargs["max_rows"] = row_chunk
    return await asyncio.to_thread(fn, *args, engine=stepped, **kwargs)
