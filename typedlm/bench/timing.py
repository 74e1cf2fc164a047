"""Timing a GPU callable for the bench scripts: the median wall time of synchronized runs after a warm-up."""

from __future__ import annotations

import statistics
import time

import torch


def cuda_ms(fn, runs: int = 7) -> float:
    """Median milliseconds of ``runs`` calls of ``fn`` (one warm-up call first), each ended by a device sync."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3
