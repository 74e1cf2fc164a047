"""The FastAPI app: ``create_app(engine_or_loader, config)``.

One folder per endpoint family, each a thin ``router`` over a serving object on ``app.state.serving``
(:class:`Serving`): ``chat/`` (/v1/chat/completions), ``completions/``, ``responses/`` (on the chat
serving object), ``decide/`` (/v1/decide, /v1/systemone), ``models/`` (/v1/models; the model check of
every request), ``admin/`` (/health, /ready, /metrics, /v1/config) and ``playground/`` (/ and its routes).
The model loads (or, given an Engine, just warms) in a background thread at startup; /ready answers 503
until that is done.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

from fastapi import FastAPI

from ..engine import Engine
from .admin.router import router as admin_router
from .chat.router import router as chat_router
from .chat.serving import ServingChat
from .completions.router import router as completions_router
from .completions.serving import ServingCompletions
from .decide.router import router as decide_router
from .decide.serving import ServingDecide
from .errors import install_error_handlers
from .gate import Gate
from .metrics import Metrics
from .models.router import router as models_router
from .models.serving import ServingModels
from .playground.router import router as playground_router
from .responses.router import router as responses_router
from .responses.serving import ServingResponses
from .state import ServerConfig, ServerState


@dataclass(frozen=True)
class Serving:
    models: ServingModels
    chat: ServingChat
    completions: ServingCompletions
    responses: ServingResponses
    decide: ServingDecide

    @classmethod
    def over(cls, state: ServerState) -> "Serving":
        models = ServingModels(state)
        chat = ServingChat(state, models)
        return cls(models, chat, ServingCompletions(state, models), ServingResponses(chat), ServingDecide(state))


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
    for r in (admin_router, models_router, chat_router, completions_router, responses_router, decide_router,
              playground_router):
        app.include_router(r)
    return app
