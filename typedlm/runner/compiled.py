"""A decoder-layer function compiled once for every bucket it runs at (``torch.compile``, static shapes but the
bucket dims).

The layer is compiled with static shapes (``dynamic=False``: weights, cache, head counts are constants to inductor)
and only the dims a bucket changes (``dims``: argument index -> dims, e.g. rows and columns of a decode step) are
marked dynamic at each call, so one graph serves every bucket of two or more rows/tokens, plus one for a single
row (torch specializes size 1; a size-1 dim is left static). Everything-dynamic (``dynamic=True``) compiled the
same graph count but with every size symbolic: more guards and slower inductor compiles, the larger part of the
warm-up (``bench roofline``'s warm-up row). Traced without duck sizing, so a bucket equal to another size (32 rows
of a 32-slot KV) is not unified with it.

:func:`release_workers`: the inductor compile-worker pool that the first compile starts is shut down after the
warm-up (it slowed the host's torch ops of later decisions; ``bench prefix-cache``); a later compile starts it
again.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, Mapping

import torch
import torch._inductor.config as inductor_config
import torch.fx.experimental._config as shape_config
from torch._inductor import async_compile

_PATCH = threading.Lock()  # the shape config is process-wide: one patched call at a time, so each restores it

Dims = Mapping[int, tuple[int, ...]]  # positional argument -> the dims of it that vary between buckets


def compiled_layer(fn: Callable, dims: Dims, backend: str = "inductor") -> Callable:
    """``fn`` compiled with static shapes except ``dims`` (marked dynamic where larger than 1). Its calls run one at
    a time (on CUDA they are the graphs' warm-up and capture runs; replays do not call it)."""
    compiled = torch.compile(fn, dynamic=False, backend=backend)

    @functools.wraps(fn)
    def run(*args):
        for i, ds in dims.items():
            for d in ds:
                if args[i].shape[d] > 1:
                    torch._dynamo.mark_dynamic(args[i], d)
        with _PATCH, shape_config.patch(use_duck_shape=False):
            return compiled(*args)

    return run


def release_workers(enabled: bool = True) -> bool:
    """Shut down inductor's compile-worker pools (``enabled``: the ``release_compile_workers`` setting); True if
    there were any. Idle workers are not free: after the first compile the host's torch ops ran several times
    slower (a later cached decision's host work)."""
    if not enabled:
        return False
    pools = getattr(async_compile, "_pool_set", None)
    shutdown = getattr(async_compile, "shutdown_compile_workers", None)
    if shutdown is None or not pools:
        return False
    shutdown()
    return True


def worker_pools() -> int:
    """Inductor compile-worker pools alive now (0 once released: ``release_compile_workers``)."""
    return len(getattr(async_compile, "_pool_set", ()))


def set_compile_threads(threads: int | None) -> None:
    """Inductor's compile-worker count (the ``compile_threads`` setting; None: inductor's own default)."""
    if threads is not None:
        inductor_config.compile_threads = threads
