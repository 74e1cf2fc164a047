"""The FastAPI app: ``create_app(engine_or_loader, config)``.

One thin router per endpoint family (:mod:`typedlm.server.routes`: admin /health /ready /metrics,
models, chat, completions, responses; :mod:`typedlm.server.decide_routes`: /v1/decide, /v1/systemone;
:mod:`typedlm.server.playground`: / and its routes), each over a serving object on
``app.state.serving`` (:class:`Serving`). The model loads (or, given an Engine, just warms) in a
background thread at startup; /ready answers 503 until that is done.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

from fastapi import FastAPI

from ..engine import Engine
from .decide_routes import router as decide_router
from .errors import install_error_handlers
from .gate import Gate
from .metrics import Metrics
from .playground import router as playground_router
from .routes import admin, chat, completions, models, responses
from .serving_chat import ServingChat
from .serving_completions import ServingCompletions
from .serving_responses import ServingResponses
from .state import ServerConfig, ServerState


@dataclass(frozen=True)
class Serving:
    chat: ServingChat
    completions: ServingCompletions
    responses: ServingResponses

    @classmethod
    def over(cls, state: ServerState) -> "Serving":
        chat_ = ServingChat(state)
        return cls(chat_, ServingCompletions(state), ServingResponses(chat_))


def create_app(engine_or_loader: Engine | Callable[[], Engine], config: ServerConfig | None = None) -> FastAPI:
    config = config or ServerConfig()
    if isinstance(engine_or_loader, Engine):
        state = ServerState(config, engine_or_none=engine_or_loader)
    elif callable(engine_or_loader):
        state = ServerState(config, loader=engine_or_loader)
    else:
        raise TypeError("create_app needs an Engine or a zero-argument callable returning one")
    state.metrics = Metrics(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state.start_loading()
        yield
        state.shutdown()

    app = FastAPI(title="typedlm", lifespan=lifespan)
    app.state.typedlm = state
    app.state.serving = Serving.over(state)
    install_error_handlers(app)
    app.add_middleware(Gate, state=state)
    for r in (admin.router, models.router, chat.router, completions.router, responses.router, decide_router,
              playground_router):
        app.include_router(r)
    return app
