"""POST /v1/decide (Decision JSON) and POST /v1/systemone (TypeSafe System One wire shape)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .protocol import DecideRequest, SystemOneRequest

router = APIRouter()


@router.post("/v1/decide")
async def v1_decide(body: DecideRequest, http: Request):
    return await http.app.state.serving.decide.decide(body, http)


@router.post("/v1/systemone")
async def v1_systemone(body: SystemOneRequest, http: Request):
    return await http.app.state.serving.decide.systemone(body, http)
