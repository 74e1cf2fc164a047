"""The served model names (the engine's own name and ``ServerConfig.model_names``): the /v1/models cards
and the check every generation request makes of its ``model``. A name not served is a 404
``model_not_found``, as OpenAI answers (its SDKs raise ``NotFoundError``)."""

from __future__ import annotations

from ...engine import Engine
from ..errors import APIError


class ServingModels:
    def __init__(self, state):
        self.state = state

    def cards(self) -> dict:
        return {"object": "list", "data": [self._card(n) for n in self.state.served_models]}

    def card(self, model: str) -> dict:
        self._check(model)
        return self._card(model)

    def engine_for(self, model: str) -> Engine:
        """The engine a request names: 503 while not ready, 404 ``model_not_found`` for another name."""
        if not self.state.ready:
            raise self.state.not_ready()
        self._check(model)
        return self.state.engine

    def _check(self, model: str) -> None:
        served = self.state.served_models
        if model not in served:
            raise APIError(404, f"model '{model}' is not served here; available: {', '.join(served)}",
                           param="model", code="model_not_found")

    def _card(self, name: str) -> dict:
        return {"id": name, "object": "model", "created": int(self.state.started), "owned_by": "typedlm"}
