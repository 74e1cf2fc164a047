"""POST /v1/completions."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .protocol import CompletionRequest

router = APIRouter()


@router.post("/v1/completions")
async def completions(body: CompletionRequest, http: Request):
    return await http.app.state.serving.completions.create(body, http)
