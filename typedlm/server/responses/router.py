"""POST /v1/responses."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .protocol import ResponsesRequest

router = APIRouter()


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, http: Request):
    return await http.app.state.serving.responses.create(body, http)
