"""The FastAPI app: ``create_app(engine_or_loader, config)``.

Routes: POST /v1/chat/completions, POST /v1/completions (+ SSE streaming), GET /v1/models,
GET /health, GET /ready, GET /metrics; /v1/decide and /v1/systemone (:mod:`typedlm.server.decide_routes`);
the playground at / with /v1/config and the preset/validate routes (:mod:`typedlm.server.playground`). The model loads (or, given an Engine, just warms) in a background thread at startup;
/ready answers 503 until that is done.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..engine import Engine
from ..generate.scheduler import DoneEvent, TokenEvent
from .decide_routes import router as decide_router
from .playground import router as playground_router
from .errors import APIError, install_error_handlers
from .gate import Gate
from ..generate.detokenize import StreamText, token_bytes
from .chat import ChatStream, encoder, message, plan
from .generation import Job, jump_forward, sampling_params, submit
from .metrics import Metrics
from .protocol import ChatRequest, CompletionRequest
from .state import ServerConfig, ServerState
from .structured import resolve


def create_app(engine_or_loader: Engine | Callable[[], Engine], config: ServerConfig | None = None) -> FastAPI:
    config = config or ServerConfig()
    if isinstance(engine_or_loader, Engine):
        state = ServerState(config, engine_or_none=engine_or_loader)
    elif callable(engine_or_loader):
        state = ServerState(config, loader=engine_or_loader)
    else:
        raise TypeError("create_app needs an Engine or a zero-argument callable returning one")
    state.metrics = Metrics(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state.start_loading()
        yield
        state.shutdown()

    app = FastAPI(title="typedlm", lifespan=lifespan)
    app.state.typedlm = state
    install_error_handlers(app)
    app.add_middleware(Gate, state=state)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/ready")
    async def ready():
        if not state.ready:
            e = state.not_ready()
            return JSONResponse({"status": "failed" if state.load_error else "loading", "error": e.message},
                                status_code=503, headers=e.headers)
        return {"status": "ready", "model": state.engine.name, "backend": state.engine.backend,
                "decide_mode": state.decide_mode,
                "cuda_graph_capture_s": round(getattr(state.scheduler.kv, "capture_s", 0.0), 2)}

    @app.get("/metrics")
    async def metrics():
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [{"id": n, "object": "model", "created": int(state.started),
                                            "owned_by": "typedlm"} for n in state.served_models]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, http: Request):
        engine = _check(state, body)
        if body.top_logprobs is not None and not body.logprobs:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        chat = plan(state, engine, body, logprobs)
        params = sampling_params(state, body, body.max_completion_tokens or body.max_tokens)
        job = await submit(state, http, structured=chat.structured, params=params, encode=encoder(engine, chat),
                           n=body.n, logprobs=logprobs, seq_kw=chat.seq_kw)
        chat.relax_notice(job)
        meta = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
        if body.stream:
            return StreamingResponse(_stream(job, http, meta, chat=chat, include_usage=body.include_usage,
                                             logprobs=logprobs is not None), media_type="text/event-stream",
                                     headers={**job.headers, "Cache-Control": "no-cache"})
        results = await job.results(http)
        choices = []
        for i, res in enumerate(results):
            lp = None
            if logprobs is not None:
                lp = {"content": [_chat_lp(engine, e) for e in _token_events(job, i)]}
            msg, finish = message(res, chat)
            choices.append({"index": i, "message": msg, "logprobs": lp, "finish_reason": finish})
        return JSONResponse({**meta, "object": "chat.completion", "choices": choices, "usage": _usage(results),
                             **_notice(job, results)}, headers=job.headers)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, http: Request):
        engine = _check(state, body)
        prompt = body.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise APIError(400, "prompt: give one prompt string (batches of prompts are not supported)",
                               param="prompt")
            prompt = prompt[0]
        structured = resolve(body)
        params = sampling_params(state, body, body.max_tokens)
        jf = jump_forward(state, body, body.logprobs)

        def encode(instruction: str | None) -> list[int]:
            return engine.encode_prompt(prompt=f"{instruction}\n\n{prompt}" if instruction else prompt)

        job = await submit(state, http, structured=structured, params=params, encode=encode, n=body.n,
                           logprobs=body.logprobs, seq_kw=lambda: {"jump_forward": jf})
        meta = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
        if body.stream:
            return StreamingResponse(_stream(job, http, meta, chat=None, include_usage=body.include_usage,
                                             logprobs=body.logprobs is not None), media_type="text/event-stream",
                                     headers={**job.headers, "Cache-Control": "no-cache"})
        results = await job.results(http)
        choices = [{"index": i, "text": res.text, "finish_reason": res.finish_reason,
                    "logprobs": _completion_lp(engine, _token_events(job, i)) if body.logprobs is not None else None}
                   for i, res in enumerate(results)]
        return JSONResponse({**meta, "object": "text_completion", "choices": choices, "usage": _usage(results),
                             **_notice(job, results)}, headers=job.headers)

    app.include_router(decide_router)
    app.include_router(playground_router)
    return app


# -- helpers ---------------------------------------------------------------------------------------
def _check(state: ServerState, body) -> Engine:
    if not state.ready:
        raise state.not_ready()
    if body.model not in state.served_models:
        raise APIError(400, f"model '{body.model}' is not served here; available: {', '.join(state.served_models)}",
                       param="model", code="model_not_found")
    return state.engine


def _notice(job: Job, results) -> dict:
    """``{"typedlm": {...}}`` when the constraint was degraded (relaxed superset grammar or free text)."""
    notice = job.notice_for(results)
    return {"typedlm": notice} if notice else {}


def _usage(results) -> dict:
    """OpenAI usage; ``completion_tokens_details.reasoning_tokens`` for reasoning models and typedlm's
    ``forced_tokens`` (appended without sampling: jump-forward, forced end of reasoning) when any."""
    prompt = results[0].prompt_tokens if results else 0
    completion = sum(r.completion_tokens for r in results)
    out = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    reasoning = sum(r.reasoning_tokens for r in results)
    if any(r.reasoning is not None for r in results):
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    forced = sum(r.forced_tokens for r in results)
    if forced:
        out["forced_tokens"] = forced
    return out


def _token_events(job: Job, i: int) -> list[TokenEvent]:
    return job.events.get(i, [])


def _token_lp(engine, token: int, logprob) -> dict:
    """One logprobs entry; ``bytes`` are the token's raw bytes (a token holding part of a multi-byte
    character reports those bytes, not U+FFFD's)."""
    return {"token": engine.tokenizer.decode([token]), "logprob": logprob, "bytes": list(token_bytes(engine, token))}


def _chat_lp(engine, ev: TokenEvent) -> dict:
    return {**_token_lp(engine, ev.token, ev.logprob),
            "top_logprobs": [_token_lp(engine, tid, lp) for tid, lp in ev.top_logprobs]}


def _completion_lp(engine, events: list[TokenEvent], offset: int = 0) -> dict:
    tokens, offsets = [], []
    for ev in events:
        tok = engine.tokenizer.decode([ev.token])
        tokens.append(tok)
        offsets.append(offset)
        offset += len(tok)
    return {"tokens": tokens, "token_logprobs": [ev.logprob for ev in events],
            "top_logprobs": [{engine.tokenizer.decode([t]): lp for t, lp in ev.top_logprobs} for ev in events],
            "text_offset": offsets}


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _stream(job: Job, http: Request, meta: dict, *, chat, include_usage: bool, logprobs: bool):
    """SSE for both routes: chat chunks carry ``delta`` objects (``chat`` is the ChatPlan), completion
    chunks ``text`` (``chat`` is None)."""
    engine = job.state.engine
    key = "delta" if chat else "text"
    base = {**meta, "object": "chat.completion.chunk" if chat else "text_completion"}

    def chunk(i, payload, finish=None, lp=None):
        out = {**base, "choices": [{"index": i, key: payload, "logprobs": lp, "finish_reason": finish}]}
        if include_usage:
            out["usage"] = None
        return _sse(out)

    rows = [ChatStream(engine, chat, r.seq) if chat else StreamText(engine.tokenizer, r.seq.params.stop)
            for r in job.reqs]
    try:
        if chat:
            for i in range(job.n):
                yield chunk(i, {"role": "assistant", "content": ""})
        while job.finished < job.n:
            i, ev = await job.next_event(http)
            if isinstance(ev, TokenEvent):
                lp = None
                if logprobs:
                    lp = ({"content": [_chat_lp(engine, ev)]} if chat
                          else _completion_lp(engine, [ev], rows[i].sent))
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
                    deltas, finish = rows[i].finish(ev.result)
                    for d in deltas:
                        yield chunk(i, d)
                    yield chunk(i, {}, finish=finish)
                else:
                    yield chunk(i, rows[i].finish(ev.result.text), finish=ev.result.finish_reason)
        results = [r.result for r in job.reqs]
        if include_usage:
            yield _sse({**base, "choices": [], "usage": _usage(results)})
        if job.notice:  # how the constraint was degraded, after the last choice (schema_valid known)
            yield _sse({**base, "choices": [], **_notice(job, results)})
        yield "data: [DONE]\n\n"
    finally:
        if job.finished < job.n:
            job.cancel()
