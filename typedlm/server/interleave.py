"""Decide beside generation: a ``/v1/decide`` request no longer stalls the decode streams.

Before, the whole decision ran as one block on the engine thread (``run_exclusive``): every running
stream waited for it (10.9 s seen on the CPU). Now the decision runs on a worker thread with a
:class:`SteppedEngine` in place of the Engine: each of its forwards is handed to the engine thread as one
queued call (``Scheduler.call``), which runs between two decode steps. While streams are decoding, a
prefill is cut into ``prefill_chunk``-token pieces (default 16) that continue one KV cache, and rows are scored
``row_chunk`` rows per pass (default 2), so no single decide forward costs much more than a decode step. With no
stream running, forwards go through whole (a lone decision is not slowed down).

Results are the same decisions: chunked prefill computes the same cache, and row chunking is the
``max_rows`` path whose parity with one pass is pinned by ``test_parity_batched_vs_one_row_at_a_time``.
Measured with ``typedlm bench itl`` (``bench/results/itl-cpu.json``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import torch

from ..engine import Engine
from ..generate.scheduler import Scheduler

class SteppedEngine:
    """The Engine, except that ``forward`` runs on the scheduler's engine thread between decode steps."""

    def __init__(self, engine: Engine, scheduler: Scheduler, *, prefill_chunk: int):
        self._engine = engine
        self._scheduler = scheduler
        self.prefill_chunk = prefill_chunk
        self.forwards = 0  # queued calls made (tests, bench)

    def __getattr__(self, name: str) -> Any:  # everything but forward is the Engine's own
        return getattr(self._engine, name)

    def busy(self) -> bool:
        """Are decode streams running or waiting? (then forwards are cut into small pieces)"""
        return bool(self._scheduler.batch_size or self._scheduler.queue_depth)

    def _call(self, *args, **kwargs):
        self.forwards += 1
        return self._scheduler.call(self._engine.forward, *args, **kwargs).result()

    def forward(self, input_ids: torch.Tensor, cache=None, **kwargs):
        n = input_ids.shape[-1]
        plain_prefill = cache is None and input_ids.shape[0] == 1 and set(kwargs) <= {"logits_to_keep"}
        if not plain_prefill or n <= self.prefill_chunk or not self.busy():
            return self._call(input_ids, cache, **kwargs)
        # a causal prompt: the same KV cache, built prefill_chunk tokens at a time (positions follow the cache)
        logits = None
        for start in range(0, n, self.prefill_chunk):
            last = start + self.prefill_chunk >= n
            keep = kwargs if last else {k: 1 for k in kwargs}  # logits_to_keep: only the last chunk's matter
            logits, cache = self._call(input_ids[:, start:start + self.prefill_chunk], cache, **keep)
        return logits, cache


async def run_stepwise(engine: Engine, scheduler: Scheduler, fn: Callable[..., Any], *args, prefill_chunk: int,
                       row_chunk: int, **kwargs) -> Any:
    """``fn(*args, engine=<SteppedEngine>, **kwargs)`` on a worker thread; with streams decoding, rows are
    scored ``row_chunk`` per pass (``max_rows``) and the prompt is prefilled ``prefill_chunk`` tokens at a time
    (``ServerConfig.decide_chunk_rows`` / ``decide_chunk_tokens``)."""
    stepped = SteppedEngine(engine, scheduler, prefill_chunk=prefill_chunk)
    if stepped.busy() and row_chunk and kwargs.get("max_rows") is None:
        kwargs["max_rows"] = row_chunk
    return await asyncio.to_thread(fn, *args, engine=stepped, **kwargs)
