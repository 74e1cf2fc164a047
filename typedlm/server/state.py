"""What request handlers get from ``request.app.state.typedlm``: the Engine and a way to run model
work without racing the decode loop.

Contract (used by the generation routes and by ``typedlm.decide.http``):
  ``state.engine``                          the one Engine
  ``await state.run_exclusive(fn, *a, **kw)`` run blocking model work ``fn`` so that it never
                                            overlaps another forward pass; returns fn's result
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from ..engine import Engine


class ExclusiveRunner:
    """Simplest implementation: one asyncio lock, the work in a worker thread."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._lock = asyncio.Lock()

    async def run_exclusive(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        async with self._lock:
            return await asyncio.to_thread(fn, *args, **kwargs)
