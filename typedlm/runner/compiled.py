"""A decoder-layer function compiled once for every bucket it runs at (``torch.compile``, dynamic shapes).

``torch.compile(dynamic=True)`` still specializes a graph where a size equals another input's size when first traced
("duck sizing"): the decode step's batch bucket equal to the slot count (32 rows of a 32-slot KV) or to the K/V heads
(4), a short prefill's 128 tokens equal to the head dimension; the next bucket then compiles again. Tracing without
duck sizing gives one graph for every bucket of two or more rows/tokens, and one more for a single row (torch
specializes sizes 0 and 1): each graph is a full inductor compile, the larger part of the warm-up.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable

import torch
import torch.fx.experimental._config as shape_config

_PATCH = threading.Lock()  # the shape config is process-wide: one patched call at a time, so each restores it


def compiled_layer(fn: Callable, backend: str = "inductor") -> Callable:
    """``fn`` compiled with dynamic shapes, traced (at its first call and any recompile) without duck sizing. Its
    calls run one at a time (on CUDA they are the graphs' warm-up and capture runs; replays do not call it)."""
    compiled = torch.compile(fn, dynamic=True, backend=backend)

    @functools.wraps(fn)
    def run(*args):
        with _PATCH, shape_config.patch(use_duck_shape=False):
            return compiled(*args)

    return run
