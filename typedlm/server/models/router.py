"""GET /v1/models and /v1/models/{id}."""

from __future__ import annotations

from fastapi import APIRouter, Request

router = APIRouter()


@router.get("/v1/models")
async def list_models(http: Request):
    return http.app.state.serving.models.cards()


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, http: Request):
    return http.app.state.serving.models.card(model_id)
