"""GET /v1/models and /v1/models/{id}."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..errors import APIError

router = APIRouter()


def _card(state, name: str) -> dict:
    return {"id": name, "object": "model", "created": int(state.started), "owned_by": "typedlm"}


@router.get("/v1/models")
async def list_models(http: Request):
    state = http.app.state.typedlm
    return {"object": "list", "data": [_card(state, n) for n in state.served_models]}


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, http: Request):
    state = http.app.state.typedlm
    if model_id not in state.served_models:
        raise APIError(404, f"model '{model_id}' is not served here; available: {', '.join(state.served_models)}",
                       param="model", code="model_not_found")
    return _card(state, model_id)
