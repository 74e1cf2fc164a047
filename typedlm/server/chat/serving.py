"""POST /v1/chat/completions: messages -> a ChatPlan (built once) -> choices (and SSE chunks)."""

from __future__ import annotations

import time
import uuid

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..errors import APIError
from ..generation import Budget, sampling_params, submit
from ..streaming import choice_stream
from ..wire import chat_lp, notice, token_events, usage
from .plan import ChatStream, message, plan
from .protocol import ChatRequest


class ServingChat:
    def __init__(self, state, models):
        self.state = state
        self.models = models  # ServingModels: the model check

    async def start(self, body: ChatRequest, http: Request, *, budget: Budget | None = None,
                    prompt_field: str = "messages"):
        """(engine, plan, job): the request planned and queued. Also the first half of /v1/responses
        (``prompt_field`` ``input``: what a prompt too long for the context names)."""
        state = self.state
        engine = self.models.engine_for(body.model)
        if body.top_logprobs is not None and not body.logprobs:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        chat = plan(state, engine, body, logprobs)
        budget = budget or Budget.of(body, "max_completion_tokens", "max_tokens")
        job = await submit(state, http, structured=chat.structured, params=sampling_params(state, body, budget),
                           budget=budget, encode=chat.encoder(engine), n=body.n, logprobs=logprobs,
                           prompt_field=prompt_field, degraded=chat.degraded)
        return engine, chat, job

    async def create(self, body: ChatRequest, http: Request):
        engine, chat, job = await self.start(body, http)
        meta = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
        if body.stream:
            rows = [ChatStream(engine, chat, r.seq) for r in job.reqs]
            return StreamingResponse(choice_stream(job, http, meta, rows, chat=True, include_usage=body.include_usage,
                                                   logprobs=body.logprobs), media_type="text/event-stream",
                                     headers={**job.headers, "Cache-Control": "no-cache"})
        results = await job.results(http)
        choices = []
        for i, res in enumerate(results):
            lp = {"content": [chat_lp(engine, e) for e in token_events(job, i)]} if body.logprobs else None
            msg, finish = message(res, chat)
            choices.append({"index": i, "message": msg, "logprobs": lp, "finish_reason": finish})
        return JSONResponse({**meta, "object": "chat.completion", "choices": choices, "usage": usage(results),
                             **notice(job, results)}, headers=job.headers)
