"""Decide slices: a decision runs on its own thread, but only inside a bounded slice of each decode step.

``--decide-mode sliced``. The decision's code runs unchanged on a worker thread (its own CUDA stream on a
GPU, like ``parallel``), so it computes exactly what it computes alone: the same forwards, the same shapes,
the same batch-invariance setting. What changes is *when* it may run while streams decode: the engine
thread lends it a slice of every step (:meth:`DecideSlices.lend`, called by the scheduler right after it
has queued the step's decode forward, so on a GPU the slice's host work overlaps the decode on the device),
and the worker stops at the next decoder-layer or lm_head boundary (a forward pre-hook, a no-op on any
thread that is not a sliced worker) or forward once the slice is spent, until the next step lends another.

Why slices of time and not a token budget inside one forward (vLLM's chunked prefill): the decode step is a
CUDA graph over the static KV and a decision's passes run eagerly on their own prefix cache with per-pass
attention masks; one forward carrying both needs a varlen attention over the two KV layouts and piecewise
graphs for every mixed token count. An eager decide forward on a GPU is launch-bound (about the same time
for 4 or 256 tokens), so the cost to bound is host time, and a layer boundary is the finest point where the
model's code can be paused without changing what it computes. Slice length = ``share`` x the measured
decode step (a low quantile of recent steps: the steps a worker slowed do not count): the streams' step
grows by at most about that (less where the slice hides under the device's decode work), and the decision
gets ``share / (1 + share)`` of the engine's time.

While no stream is decoding or waiting, workers run freely (the decision's own speed). Several decisions
share one slice (all active workers run in it).
"""

from __future__ import annotations

import collections
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Callable

import torch

_worker = threading.local()  # .slices: the DecideSlices this thread is a worker of
_hooked: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # modules that carry the checkpoint hook


def checkpoint(*_args) -> None:
    """On a sliced worker thread: :meth:`DecideSlices.checkpoint`; elsewhere nothing (a layer pre-hook)."""
    slices = getattr(_worker, "slices", None)
    if slices is not None:
        slices.checkpoint()


class DecideSlices:
    """The engine thread lends workers slices of its steps; workers park at layer boundaries between them."""

    WINDOW = 64  # recent decode steps the slice length is read from ...
    QUANTILE = 0.1  # ... at this quantile: a step slowed by a worker past its slice must not lengthen the next slice
    GRACE = 0.5  # of a slice: how long the engine waits past the deadline for a worker to reach a boundary
    POLL_S = 0.02  # a parked worker re-checks whether streams still decode (slices wake it sooner)
    MAX_STEP_S = 1.0  # a longer gap between two slices is idle time, not a step

    def __init__(self, layers: list[torch.nn.Module], busy: Callable[[], bool], *, share: float):
        """``layers``: where workers may stop (:func:`decoder_layers`); ``busy``: are streams decoding or waiting?
        ``share``: a slice's length as a fraction of the measured decode step."""
        self.share = share
        self.busy = busy
        self._steps: collections.deque[float] = collections.deque(maxlen=self.WINDOW)
        self.step_s: float | None = None  # a decode step without its slice (QUANTILE of the last WINDOW)
        self._cond = threading.Condition()
        self._deadline = 0.0
        self._last = 0.0  # when the last slice ended
        self._active = 0  # workers inside a decision
        self._parked = 0  # of them, waiting for a slice
        self.slices = 0  # slices lent to at least one worker (tests, bench)
        self.parks = 0  # times a worker stopped at a boundary
        for layer in layers:  # once per module, whichever server made it: the hook finds its worker's slices
            if layer not in _hooked:
                layer.register_forward_pre_hook(checkpoint)
                _hooked.add(layer)

    # -- worker side ------------------------------------------------------------------------------------
    @contextmanager
    def worker(self):
        """This thread is a sliced worker inside the block (one decision), which starts inside a slice (its host work
        before the first forward — prompt, tokens, plan — must not run beside a step either)."""
        with self._cond:
            self._active += 1
        _worker.slices = self
        try:
            self.checkpoint()
            yield
        finally:
            _worker.slices = None
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def checkpoint(self) -> None:
        """At a layer or forward boundary of a worker: go on inside a slice or with no stream decoding, else park
        until the next slice."""
        if time.perf_counter() < self._deadline or not self.busy():
            return
        with self._cond:
            self.parks += 1
            self._parked += 1
            self._cond.notify_all()
            while self.busy() and time.perf_counter() >= self._deadline:
                self._cond.wait(self.POLL_S)
            self._parked -= 1

    # -- engine side ------------------------------------------------------------------------------------
    def _measure(self, now: float) -> None:
        """A decode step's own time: from the end of the last slice to this one (an idle gap is no step)."""
        gap, self._last = now - self._last, now
        if gap < self.MAX_STEP_S:
            self._steps.append(gap)
            self.step_s = sorted(self._steps)[int(self.QUANTILE * (len(self._steps) - 1))]

    def slice_s(self) -> float:
        return self.share * (self.step_s or 0.0)

    def lend(self) -> None:
        """Called once per decode step by the engine thread: one slice to the active workers; returns when they
        are all parked again (or the slice and its grace are over: a worker busy between boundaries goes on
        beside the next step until it reaches one)."""
        now = time.perf_counter()
        self._measure(now)
        with self._cond:
            if not self._active or not self.step_s:
                return
            length = self.slice_s()
            self._deadline, end = now + length, now + length * (1 + self.GRACE)
            self.slices += 1
            self._cond.notify_all()
            while self._active and (now < self._deadline or self._parked < self._active) and now < end:
                self._cond.wait(max(0.0, (self._deadline if now < self._deadline else end) - now))
                now = time.perf_counter()
        self._last = time.perf_counter()


def decoder_layers(model) -> list[torch.nn.Module]:
    """Where a worker may stop inside a torch model's forward: each decoder layer (Llama / Qwen / Mistral / Gemma
    shape: ``model.model.layers``) and the lm_head; none known (or not a torch model: MLX): the workers stop at
    forward boundaries only."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or not isinstance(model, torch.nn.Module):
        return []
    head = model.get_output_embeddings()
    return [m for m in layers if isinstance(m, torch.nn.Module)] + ([head] if head is not None else [])
