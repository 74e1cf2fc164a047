"""POST /v1/completions: a prompt string -> choices of text (and SSE chunks)."""

from __future__ import annotations

import time
import uuid

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from ...generate.detokenize import StreamText
from ..errors import APIError
from ..generation import Budget, Prompt, jump_forward, sampling_params, submit
from ..streaming import choice_stream
from ..structured import resolve
from ..wire import completion_lp, notice, token_events, usage
from .protocol import CompletionRequest


class ServingCompletions:
    def __init__(self, state, models):
        self.state = state
        self.models = models  # ServingModels: the model check

    async def create(self, body: CompletionRequest, http: Request):
        engine = self.models.engine_for(body.model)
        prompt = body.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise APIError(400, "prompt: give one prompt string (batches of prompts are not supported)",
                               param="prompt")
            prompt = prompt[0]
        structured = resolve(body)
        budget = Budget.of(body, "max_tokens")
        kw = {"jump_forward": jump_forward(self.state, body, body.logprobs)}

        def encode(instruction: str | None) -> Prompt:
            return Prompt(engine.encode_prompt(prompt=f"{instruction}\n\n{prompt}" if instruction else prompt), kw)

        job = await submit(self.state, http, structured=structured, params=sampling_params(self.state, body, budget),
                           budget=budget, encode=encode, n=body.n, logprobs=body.logprobs, prompt_field="prompt")
        meta = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
        if body.stream:
            rows = [StreamText(engine.tokenizer, r.seq.params.stop) for r in job.reqs]
            return StreamingResponse(choice_stream(job, http, meta, rows, chat=False, include_usage=body.include_usage,
                                                   logprobs=body.logprobs is not None),
                                     media_type="text/event-stream", headers={**job.headers, "Cache-Control": "no-cache"})
        results = await job.results(http)
        choices = [{"index": i, "text": res.text, "finish_reason": res.finish_reason,
                    "logprobs": completion_lp(engine, token_events(job, i)) if body.logprobs is not None else None}
                   for i, res in enumerate(results)]
        return JSONResponse({**meta, "object": "text_completion", "choices": choices, "usage": usage(results),
                             **notice(job, results)}, headers=job.headers)
