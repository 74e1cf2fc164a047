"""POST /v1/chat/completions."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .protocol import ChatRequest

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatRequest, http: Request):
    return await http.app.state.serving.chat.create(body, http)
