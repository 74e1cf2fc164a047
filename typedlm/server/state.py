"""What request handlers get from ``request.app.state.typedlm``: the Engine and a way to run model
work without racing the decode loop.

Contract (used by the serving objects of every endpoint family):
  ``state.engine``                          the one Engine (503 ``APIError`` while not loaded yet)
  ``await state.run_decision(fn, *a, **kw)``  ``fn(*a, engine=..., **kw)`` for decide work on a worker thread:
                                            its forwards are work of the scheduler, run inside engine steps
                                            within their token budget (:mod:`typedlm.generate.scheduled`)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..engine import Engine
from ..generate.api import build_sequence
from ..generate.sampling import SamplingParams
from ..generate.requests import Request
from ..generate.scheduled import scheduled_engine
from ..generate.scheduler import Scheduler
from ..grammar.spec import make_constraint
from .config import REDACTED
from .errors import DISCONNECT_POLL_S, APIError, ClientGone

log = logging.getLogger("typedlm.server")


@dataclass
class ServerConfig:
    api_key: str | None = None
    max_batch: int = 8
    max_queue: int = 64
    max_body_bytes: int = 4 * 1024 * 1024
    max_prompt_tokens: int | None = None  # None: the model's context
    max_tokens_cap: int = 4096  # max_tokens above this is lowered to it; also the default
    retry_after_s: int = 1
    model_names: tuple[str, ...] = ()  # extra names /v1/models lists and requests may use
    warmup: bool = True
    jump_forward: bool = False  # default for requests that do not set ``jump_forward``
    settings: Any = None  # typedlm.server.config.ServeSettings under `typedlm serve` (/v1/config, the ready line)

    def redacted(self) -> dict:
        """The limits as /v1/config shows them: the API key is never returned."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "settings"}
        d["api_key"] = REDACTED if self.api_key else None
        return d


@dataclass
class ServerState:
    config: ServerConfig
    loader: Callable[[], Engine] | None = None
    engine_or_none: Engine | None = None
    scheduler: Scheduler | None = None
    ready: bool = False
    load_error: str | None = None
    started: float = field(default_factory=time.time)
    metrics: Any = None

    @property
    def engine(self) -> Engine:
        if self.engine_or_none is None or self.scheduler is None:
            raise self.not_ready()
        return self.engine_or_none

    @property
    def served_models(self) -> list[str]:
        names = [self.engine_or_none.name] if self.engine_or_none is not None else []
        return names + [n for n in self.config.model_names if n not in names]

    def not_ready(self) -> APIError:
        if self.load_error:
            return APIError(503, f"model failed to load: {self.load_error}", type="server_error",
                            code="model_load_failed")
        return APIError(503, "model is loading; retry shortly", type="server_error", code="not_ready",
                        headers={"Retry-After": str(self.config.retry_after_s)})

    async def run_decision(self, fn: Callable[..., Any], *args, http=None, **kwargs) -> Any:
        """``fn(*args, engine=<the engine with a ScheduledRunner>, **kwargs)`` on a worker thread: every forward it
        makes is work of the scheduler (a step's token budget); a cancelled request, or one whose client ``http``
        has left (polled every ``DISCONNECT_POLL_S``: ``ClientGone``), drops what it has queued."""
        if not self.ready:
            raise self.not_ready()
        engine = scheduled_engine(self.engine, self.scheduler)
        task = asyncio.ensure_future(asyncio.to_thread(fn, *args, engine=engine, **kwargs))
        try:
            while not (await asyncio.wait({task}, timeout=DISCONNECT_POLL_S))[0]:
                if http is not None and await http.is_disconnected():
                    raise ClientGone("client disconnected")
            return task.result()
        except (asyncio.CancelledError, ClientGone):
            engine.runner.cancel()  # the thread's next forward raises; its error is nobody's
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            raise

    # -- lifecycle --------------------------------------------------------------------------------
    def start_loading(self) -> threading.Thread:
        t = threading.Thread(target=self._load, name="typedlm-load", daemon=True)
        t.start()
        return t

    def _load(self) -> None:
        try:
            engine = self.engine_or_none or self.loader()
            sched = Scheduler(engine, max_batch=self.config.max_batch, max_queue=self.config.max_queue).start()
            self.engine_or_none, self.scheduler = engine, sched
            if self.config.warmup:
                _warm(engine, sched)
            self.ready = True
            where = f" at {self.config.settings.url} (playground: {self.config.settings.url}/)" \
                if self.config.settings is not None else ""
            log.info("typedlm ready: model %s on %s%s", engine.name, engine.device, where)
        except Exception as e:  # noqa: BLE001 - written down, served as 503 on /ready
            log.exception("model load failed")
            self.load_error = f"{type(e).__name__}: {e}"

    def shutdown(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()


def _warm(engine: Engine, sched: Scheduler) -> None:
    """CUDA graphs of every bucket (no request pays a capture; the compile workers released once, after them), then
    one short free row and one JSON row through the real batch path (allocator, kernels, grammar)."""
    sched.call(sched.runner.capture, sched.kv).result(600)
    ids = engine.encode_prompt(prompt="Hello")
    seqs = [build_sequence(engine, ids, SamplingParams(max_tokens=2, temperature=0), None),
            build_sequence(engine, ids, SamplingParams(max_tokens=2, temperature=0), make_constraint(json_object=True))]
    for r in sched.submit_all([Request(seq=s) for s in seqs], force=True):
        r.done.wait(600)
