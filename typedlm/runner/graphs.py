"""CUDA graphs of the static-slot decode step: one graph per ``(batch bucket, column bucket)``.

A step copies its ids/positions into the runner's input buffers, replays the bucket's graph and reads
the graph's output (the caller copies what it keeps: the next replay overwrites it). ``capture`` at
warm-up records every bucket up to a length; a bucket first met later is captured then.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

MIN_BUCKET = 256  # smallest column bucket on CUDA


def bucket(n: int, top: int) -> int:
    """The power of two at or above ``n``, at most ``top``."""
    b = 1
    while b < n:
        b *= 2
    return min(b, top)


def batch_buckets(capacity: int) -> list[int]:
    out, b = [], 1
    while True:
        out.append(min(b, capacity))
        if b >= capacity:
            return out
        b *= 2


def column_buckets(top: int, max_len: int) -> list[int]:
    out, c = [], min(MIN_BUCKET, max_len)
    while True:
        out.append(min(c, max_len))
        if c >= top:
            return out
        c *= 2


class DecodeGraphs:
    """``run(b, cols)`` is the eager decode step over the runner's input buffers; ``reset(b)`` puts
    harmless inputs in them (rows write the scratch column) before a capture's warm-up runs."""

    def __init__(self, device: torch.device, run: Callable[[int, int], torch.Tensor],
                 reset: Callable[[int], None], inputs: torch.Tensor, capture_mode: str = "global",
                 after_capture: Callable[[], object] | None = None):
        """``capture_mode``: ``torch.cuda.graph``'s ``capture_error_mode`` ("thread_local": captures on first use
        while other threads keep running CUDA work, as a decision's beside generation streams). ``after_capture``:
        called after a capture on first use (at a replay), e.g. to release the compile workers."""
        self.device, self._run, self._reset, self._inputs = device, run, reset, inputs
        self._after_capture = after_capture
        self.capture_mode = capture_mode
        self.graphs: dict[tuple[int, int], tuple] = {}
        self._pool = None
        self.capture_s = 0.0
        self.spans: dict[tuple[int, int], float] = {}  # seconds each graph's capture took (its warm-up runs too)

    def __len__(self) -> int:
        return len(self.graphs)

    def clear(self) -> None:
        """Drop every graph, and their memory pool with them: the next capture takes a new pool (capturing into a
        pool whose graphs are all gone trips the caching allocator's use-count assert)."""
        self.graphs.clear()
        self.spans.clear()
        self._pool = None

    def get(self, b: int, cols: int):
        key = (b, cols)
        if key not in self.graphs:
            t0 = time.perf_counter()
            self._reset(b)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            s = torch.cuda.Stream(self.device)
            s.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(s):
                for _ in range(2):
                    self._run(b, cols)
            torch.cuda.current_stream(self.device).wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self._pool, capture_error_mode=self.capture_mode):
                out = self._run(b, cols)
            self.graphs[key] = (g, out)
            self.spans[key] = time.perf_counter() - t0
            self.capture_s += self.spans[key]
        return self.graphs[key]

    def replay(self, b: int, cols: int) -> torch.Tensor:
        if (b, cols) not in self.graphs:
            # inputs were already staged for this step: keep them across the capture's warm-up runs
            saved = self._inputs[:, :b].clone()
            self.get(b, cols)
            self._inputs[:, :b].copy_(saved)
            if self._after_capture is not None:
                self._after_capture()
        g, out = self.graphs[(b, cols)]
        g.replay()
        return out

    def capture(self, batches: list[int], cols: list[int]) -> None:
        for b in reversed(batches):
            for c in reversed(cols):
                self.get(b, c)
        torch.cuda.synchronize(self.device)
