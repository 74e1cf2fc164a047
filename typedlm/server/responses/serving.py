"""POST /v1/responses: translated to a chat request (:func:`typedlm.server.responses.translate.to_chat`), run by
the chat serving object, answered as a Response resource or its event stream."""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..generation import Budget
from ..wire import notice
from .protocol import ResponsesRequest, new_id, output_items, response_object, responses_usage, status_of
from .stream import response_events
from .translate import to_chat


class ServingResponses:
    def __init__(self, chat):
        self.chat = chat  # ServingChat

    async def create(self, body: ResponsesRequest, http: Request):
        _, plan, job = await self.chat.start(to_chat(body), http, budget=Budget.of(body, "max_output_tokens"),
                                              prompt_field="input")
        rid, created = new_id("resp"), int(time.time())
        if body.stream:
            return StreamingResponse(response_events(job, http, plan, body, rid, created),
                                     media_type="text/event-stream", headers={**job.headers, "Cache-Control": "no-cache"})
        results = await job.results(http)
        res = results[0]
        status, incomplete, error = status_of(res.finish_reason)
        output = output_items(res, plan.tool_mode != "none", plan.include_reasoning)
        obj = response_object(body, rid, created, status=status, output=output, usage=responses_usage(results),
                              incomplete=incomplete, error=error)
        return JSONResponse({**obj, **notice(job, results)}, headers=job.headers)
