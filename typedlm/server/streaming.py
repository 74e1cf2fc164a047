"""Server-sent events: the framing (:func:`sse`, also the Responses stream's) and the chunk stream of
/v1/chat/completions and /v1/completions: one chunk per delta, usage and the ``typedlm`` notice after the
last choice, then ``[DONE]``."""

from __future__ import annotations

import json

from fastapi import Request

from ..generate.scheduler import DoneEvent, TokenEvent
from .generation import Job
from .wire import chat_lp, completion_lp, notice, usage


def sse(obj, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def choice_stream(job: Job, http: Request, meta: dict, rows: list, *, chat: bool, include_usage: bool,
                        logprobs: bool):
    """Chat chunks carry ``delta`` objects (``rows``: a ``ChatStream`` per choice: ``add`` -> deltas,
    ``final_deltas``), completion chunks ``text`` (``rows``: a ``StreamText`` per choice)."""
    engine = job.state.engine
    key = "delta" if chat else "text"
    base = {**meta, "object": "chat.completion.chunk" if chat else "text_completion"}

    def chunk(i, payload, finish=None, lp=None):
        out = {**base, "choices": [{"index": i, key: payload, "logprobs": lp, "finish_reason": finish}]}
        if include_usage:
            out["usage"] = None
        return sse(out)

    try:
        if chat:
            for i in range(job.n):
                yield chunk(i, {"role": "assistant", "content": ""})
        while job.finished < job.n:
            i, ev = await job.next_event(http)
            if isinstance(ev, TokenEvent):
                lp = None
                if logprobs:
                    lp = {"content": [chat_lp(engine, ev)]} if chat else completion_lp(engine, [ev], rows[i].sent)
                if chat:
                    deltas = rows[i].add(ev.token)
                    if lp and not deltas:
                        deltas = [{"content": ""}]
                    for n, d in enumerate(deltas):
                        yield chunk(i, d, lp=lp if n == 0 else None)
                else:
                    text = rows[i].add(ev.token)
                    if text or lp:
                        yield chunk(i, text, lp=lp)
            elif isinstance(ev, DoneEvent):
                if chat:
                    deltas, finish = rows[i].final_deltas(ev.result)
                    for d in deltas:
                        yield chunk(i, d)
                    yield chunk(i, {}, finish=finish)
                else:
                    yield chunk(i, rows[i].finish(ev.result.text), finish=ev.result.finish_reason)
        results = [r.result for r in job.reqs]
        if include_usage:
            yield sse({**base, "choices": [], "usage": usage(results)})
        if job.notice:  # how the constraint was degraded, after the last choice (schema_valid known)
            yield sse({**base, "choices": [], **notice(job, results)})
        yield "data: [DONE]\n\n"
    finally:
        if job.finished < job.n:
            job.cancel()
