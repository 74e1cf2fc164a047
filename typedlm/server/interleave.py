"""Decide beside generation: a ``/v1/decide`` request runs without stalling the decode streams.

Before, the whole decision ran as one block on the engine thread (``exclusive``): every running stream
waited for it (10.9 s seen on the CPU). Now the decision runs on a worker thread with a
:class:`SteppedEngine` in place of the Engine, in one of three modes (``ServerConfig.decide_mode``):

- ``interleaved``: each of its forwards is handed to the engine thread as one queued call
  (``Scheduler.call``), which runs between two decode steps. While streams are decoding, a prefill is cut
  into pieces that continue one KV cache, each sized from measurements to cost about one decode step, and
  rows are scored ``row_chunk`` per pass (default 1): a stream may arrive while they are scored, and a pass
  cannot be cut later. With no stream running, a prefill goes whole. A decode step followed by one decide
  forward costs about two steps on a CPU (every forward of a few tokens reads all weights), so this bounds
  streaming p99 ITL near 2x there.
- ``parallel``: the forwards run on the worker thread itself, beside the decode steps (torch releases the
  GIL inside its ops; the model is read-only and the decision has its own KV cache); on a GPU the whole
  decision runs on its own CUDA stream. On a CPU it needs a core that torch's intra-op threads leave free.

- ``sliced``: as ``parallel``, but the worker runs only inside a bounded slice of each decode step that the
  engine thread lends it, pausing at layer boundaries in between (:mod:`.slices`).

``auto`` (the default) picks ``parallel`` on CUDA and for a CPU engine with ``torch.get_num_threads()``
below the core count, else ``interleaved``. Measured p99 ITL of 4 streams beside back-to-back decisions vs
the streams alone: H200 parallel 0.97x, interleaved 9.6x (a 2.4 ms graph step waits for each ~30 ms eager
decide forward); quiet CPU parallel 1.03x, interleaved 2.27x; a 2-core CPU with no core free 2.6-2.7x both. Results are the same decisions in every mode: chunked prefill computes the same cache, and row
chunking is the ``max_rows`` path whose parity with one pass is pinned by
``test_parity_batched_vs_one_row_at_a_time``. Numbers (``typedlm bench itl``): docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any, Callable

import torch

from ..engine import Engine
from ..generate.scheduler import Scheduler
from ..runner.invariant import mode as invariant
from .slices import DecideSlices, checkpoint

DECIDE_MODES = ("auto", "interleaved", "parallel", "sliced", "exclusive")


def resolve_decide_mode(mode: str, engine: Engine) -> str:
    """``auto`` -> ``parallel`` on CUDA, or on a CPU engine with a core left over by torch's threads; else
    ``interleaved``."""
    if mode not in DECIDE_MODES:
        raise ValueError(f"decide mode must be one of {', '.join(DECIDE_MODES)}, not {mode!r}")
    if mode != "auto":
        return mode
    if engine.device.type == "cuda":
        return "parallel"
    spare_core = torch.get_num_threads() < (os.cpu_count() or 1)
    return "parallel" if engine.device.type == "cpu" and spare_core else "interleaved"

class SteppedEngine:
    """The Engine, except that its runner's forwards (``runner.wrapped``) run on the scheduler's engine
    thread between decode steps (or, ``parallel``, on the calling worker thread beside them).

    Prefill chunks are sized from measurements: ``step_s`` (EMA of how long a queued forward waits for its
    step, i.e. about one decode step) and ``token_s`` (EMA of forward seconds per token); a chunk gets
    ``STEP_SHARE * step_s / token_s`` tokens (at least 1, at most ``max_chunk``), so a decode step plus one
    decide chunk stays well under 2 decode steps (a larger share lets the estimate lag a growing cache). The first chunk, before any measurement, is ``FIRST_CHUNK``."""

    FIRST_CHUNK = 4
    STEP_SHARE = 0.5
    EMA = 0.3

    def __init__(self, engine: Engine, scheduler: Scheduler, *, max_chunk: int, parallel: bool = False):
        self._engine = engine
        self.runner = engine.runner.wrapped(self.forward)
        self.parallel = parallel
        self._scheduler = scheduler
        self.max_chunk = max_chunk
        self.forwards = 0  # forwards made (tests, bench)
        self.step_s: float | None = None
        self.token_s: float | None = None

    def __getattr__(self, name: str) -> Any:  # everything but the runner is the Engine's own
        return getattr(self._engine, name)

    def busy(self) -> bool:
        """Are decode streams running or waiting? (then forwards are cut into small pieces)"""
        return bool(self._scheduler.batch_size or self._scheduler.queue_depth)

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.EMA) * old + self.EMA * new

    def _call(self, input_ids, *args, **kwargs):
        self.forwards += 1
        if self.parallel:  # on this worker thread, beside the decode steps (grad mode is per thread)
            checkpoint()  # sliced: waits for the step's slice
            with torch.inference_mode():
                return self._engine.runner.forward(input_ids, *args, **kwargs)
        took = {}

        def timed():
            t = time.perf_counter()
            out = self._engine.runner.forward(input_ids, *args, **kwargs)
            took["s"] = time.perf_counter() - t
            return out

        t0 = time.perf_counter()
        out = self._scheduler.call(invariant.bound(timed)).result()  # the caller's batch-invariance too
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
        if not plain_prefill or not self.busy() or self.parallel:
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
                       row_chunk: int, parallel: bool = False, slices: DecideSlices | None = None, **kwargs) -> Any:
    """``fn(*args, engine=<SteppedEngine>, **kwargs)`` on a worker thread. Interleaved: rows are scored
    ``row_chunk`` per pass (``max_rows``) and, with streams decoding, the prompt is prefilled in measured chunks
    of at most ``prefill_chunk`` tokens (``ServerConfig.decide_chunk_rows`` / ``decide_chunk_tokens``).
    Parallel: the decision's own passes, unchanged, beside the decode steps. ``slices`` (sliced): those passes,
    paused at layer boundaries outside the slices the engine thread lends (:mod:`.slices`)."""
    parallel = parallel or slices is not None
    stepped = SteppedEngine(engine, scheduler, max_chunk=prefill_chunk, parallel=parallel)
    if not parallel and kwargs.get("max_rows") is None:  # always: a stream may arrive while the rows are scored
        kwargs["max_rows"] = row_chunk

    def work():
        with slices.worker() if slices is not None else contextlib.nullcontext():
            if parallel and engine.device.type == "cuda":  # its own stream: its kernels beside the decode graphs
                with torch.cuda.stream(torch.cuda.Stream(engine.device)):
                    return fn(*args, engine=stepped, **kwargs)
            return fn(*args, engine=stepped, **kwargs)

    return await asyncio.to_thread(work)
