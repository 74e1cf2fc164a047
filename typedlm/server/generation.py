"""Request -> sequences in the scheduler -> events back on the event loop.

Shared by /v1/chat/completions and /v1/completions: sampling params, the structured-output policy
(400 or degrade + Warning), prompt limits, admission (429), waiting with disconnect detection,
incremental detokenization for streams, and the metrics each finished request records.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from fastapi import Request as HTTPRequest

from ..errors import GrammarCompileError, TypedLMError
from ..grammar.compiler import GrammarDisabled
from ..grammar.spec import make_constraint
from ..generate.api import build_sequence
from ..generate.result import GenerationResult
from ..generate.sampling import SamplingParams
from ..generate.requests import DoneEvent, QueueFull, Request, TokenEvent
from .errors import DISCONNECT_POLL_S, APIError, ClientGone
from .state import ServerState
from .structured import Structured, is_degradable


@dataclass(frozen=True)
class Budget:
    """The output-token limit a request asked for: ``field`` names it (max_tokens, max_completion_tokens,
    max_output_tokens), ``asked`` is None when the request left it out. An explicit limit above the room
    the context leaves after the prompt is a 400 naming the limit (as vLLM does); an absent one is the
    server's ``max_tokens_cap`` or the room, whichever is lower."""

    field: str
    asked: int | None

    @classmethod
    def of(cls, body, *fields: str) -> "Budget":
        for f in fields:
            if getattr(body, f, None) is not None:
                return cls(f, getattr(body, f))
        return cls(fields[0], None)


@dataclass(frozen=True)
class Prompt:
    """An encoded prompt and the ``build_sequence`` keywords that come with it (reasoning mode, ...)."""

    ids: list[int]
    seq_kw: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Degraded:
    """How a request's constraint was weakened: the ``Warning`` header, the response's ``typedlm``
    field, and the check of a result against the original schema (None: the result's own verdict)."""

    warning: str
    notice: dict
    check: Callable | None = None


def sampling_params(state: ServerState, body, budget: Budget) -> SamplingParams:
    cap = state.config.max_tokens_cap
    try:
        return SamplingParams(max_tokens=min(budget.asked or cap, cap), temperature=body.temperature,
                              top_p=body.top_p, top_k=max(0, body.top_k), seed=body.seed, stop=body.stop or (),
                              repetition_penalty=body.repetition_penalty, logit_bias=body.logit_bias_pairs)
    except ValueError as e:
        raise APIError(400, str(e)) from e


def check_context(state: ServerState, ids: list[int], budget: Budget, prompt_field: str) -> None:
    """400 ``context_length_exceeded`` naming the prompt (``prompt_field``: messages, prompt, input) when it
    leaves no room for one output token or passes the server's ``max_prompt_tokens``, else naming the
    output limit when an explicit one does not fit beside the prompt."""
    context, cap = state.engine.max_context, state.config.max_prompt_tokens
    if len(ids) >= context:
        raise APIError(400, f"{prompt_field}: the prompt has {len(ids)} tokens, but the model's context is "
                            f"{context} tokens (the prompt and at least one output token must fit)",
                       param=prompt_field, code="context_length_exceeded")
    if cap is not None and len(ids) > cap:
        raise APIError(400, f"{prompt_field}: the prompt has {len(ids)} tokens; this server accepts at most {cap}",
                       param=prompt_field, code="context_length_exceeded")
    room = context - len(ids)
    if budget.asked is not None and budget.asked > room:
        raise APIError(400, f"{budget.field} is {budget.asked}, but the model's context is {context} "
                            f"tokens and the prompt has {len(ids)}: at most {room} output tokens fit",
                       param=budget.field, code="context_length_exceeded")


def warning_header(reason: str, what: str = "response_format not enforced") -> str:
    text = " ".join(str(reason).split()).replace("\\", "\\\\").replace('"', '\\"')
    text = text.encode("ascii", "replace").decode("ascii")[:300]
    return f'199 typedlm "{what}: {text}"'


def relaxed_grammar(engine, structured: Structured, err: GrammarCompileError):
    """For a degradable json_schema refusal: (compiled superset grammar, relaxed places), from the lenient
    compile of the same schema (:func:`typedlm.grammar.schema.prepare_lenient`, cached like any constraint);
    None when nothing could be relaxed (then the request degrades to free text)."""
    c = structured.constraint
    if isinstance(err, GrammarDisabled) or c is None or c.kind != "json_schema" or not err.keyword:
        return None
    lenient = make_constraint(json_schema=c.value, any_whitespace=c.any_whitespace, strict=c.strict, lenient=True,
                              engine=c.engine)
    try:
        compiled, _ = engine.grammars.compile(lenient, warn=False)  # the Warning header names the places
    except GrammarCompileError:
        return None
    done = engine.grammars.relaxed_places(lenient)
    return (compiled, done) if done else None


@dataclass
class Job:
    """One HTTP request's choices (n sequences) in the scheduler."""

    state: ServerState
    reqs: list[Request]
    queue: asyncio.Queue
    t0: float
    headers: dict = field(default_factory=dict)
    first_token_at: float | None = None
    finished: int = 0
    events: dict = field(default_factory=dict)  # choice index -> [TokenEvent] (for logprobs)
    polled: float = field(default_factory=time.perf_counter)  # last client-disconnect check
    degraded: Degraded | None = None  # how the constraint was weakened (the response's ``typedlm`` field)

    @property
    def notice(self) -> dict | None:
        return self.degraded.notice if self.degraded else None

    def notice_for(self, results) -> dict | None:
        if self.degraded is None:
            return None
        out = dict(self.degraded.notice)
        if out.get("degraded") == "relaxed":
            check = self.degraded.check or (lambda r: (r.schema_valid, r.schema_errors))
            checked = [check(r) for r in results]
            out["schema_valid"] = [v for v, _ in checked]
            out["schema_errors"] = [e for _, e in checked]
        return out

    @property
    def n(self) -> int:
        return len(self.reqs)

    def cancel(self) -> None:
        for r in self.reqs:
            if not r.done.is_set():
                self.state.scheduler.cancel(r)

    async def next_event(self, http: HTTPRequest | None = None):
        """The next (choice index, event); polls for a client disconnect while waiting (-> cancel)."""
        while True:
            now = time.perf_counter()
            if http is not None and now - self.polled >= DISCONNECT_POLL_S:
                self.polled = now
                if await http.is_disconnected():
                    self.cancel()
                    raise ClientGone("client disconnected")
            try:
                i, ev = await asyncio.wait_for(self.queue.get(), DISCONNECT_POLL_S)
            except TimeoutError:
                continue
            if isinstance(ev, TokenEvent):
                self.events.setdefault(i, []).append(ev)
            if isinstance(ev, TokenEvent) and self.first_token_at is None:
                self.first_token_at = time.perf_counter()
                self.state.metrics.ttft.observe(self.first_token_at - self.t0)
            if isinstance(ev, DoneEvent):
                self.finished += 1
                if self.finished == self.n:
                    self.state.metrics.latency.observe(time.perf_counter() - self.t0)
            return i, ev

    async def results(self, http: HTTPRequest) -> list[GenerationResult]:
        try:
            while self.finished < self.n:
                await self.next_event(http)
        finally:
            if self.finished < self.n:
                self.cancel()
        return [r.result for r in self.reqs]



def jump_forward(state: ServerState, body, logprobs) -> bool:
    """The request's ``jump_forward``, else the server's default; never with logprobs (forced tokens
    are not sampled, so they have none)."""
    if body.jump_forward and logprobs is not None:
        raise APIError(400, "jump_forward cannot be combined with logprobs (forced tokens are not sampled)",
                       param="jump_forward")
    on = state.config.jump_forward if body.jump_forward is None else body.jump_forward
    return bool(on) and logprobs is None


async def submit(state: ServerState, http: HTTPRequest, *, structured: Structured, params: SamplingParams,
                 budget: Budget, encode: Callable[[str | None], Prompt], n: int, logprobs: int | None,
                 prompt_field: str, degraded: Degraded | None = None) -> Job:
    """Compile (or degrade), build ``n`` sequences, queue them. Raises APIError 400 / 429.
    ``encode(instruction)``: the prompt (with the degrade instruction, when given), ``prompt_field`` the
    request field it comes from (named by a 400); ``degraded``: a weakening the plan already knows of
    (relaxed tool schemas)."""
    t0 = time.perf_counter()
    state.engine  # 503 while not loaded
    headers = {"X-TypedLM-Constraint": structured.source} if structured.source else {}
    try:
        prompt = _encode(encode, None)
        check_context(state, prompt.ids, budget, prompt_field)
        seqs = await asyncio.to_thread(_build, state, prompt, params, structured.constraint, n)
    except GrammarCompileError as e:
        if not is_degradable(structured, e):
            raise APIError(400, f"{structured.source}: {e}", param=e.pointer or structured.source,
                           code="grammar_compile_error") from e
        relaxed = await asyncio.to_thread(relaxed_grammar, state.engine, structured, e)
        if relaxed is not None:  # a superset grammar: structure kept, the output validated with jsonschema
            compiled, done = relaxed
            places = "; ".join(f"{d['keyword']} at {d['pointer']}" for d in done)
            degraded = Degraded(warning_header(f"relaxed {places}; the output is validated with jsonschema "
                                               "(see typedlm.schema_valid)", "response_format partly enforced"),
                                {"degraded": "relaxed", "reason": str(e), "relaxed": done})
            seqs = await asyncio.to_thread(_build, state, prompt, params, structured.constraint, n, compiled)
        else:
            degraded = Degraded(warning_header(str(e)), {"degraded": "free_text", "reason": str(e)})
            prompt = _encode(encode, structured.instruction())
            check_context(state, prompt.ids, budget, prompt_field)
            seqs = await asyncio.to_thread(_build, state, prompt, params, None, n)
    except TypedLMError as e:
        raise APIError(400, str(e)) from e
    if degraded is not None:
        state.metrics.degraded.inc()
        headers["Warning"] = degraded.warning
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def listener(i):
        def on_event(ev):  # engine thread
            if isinstance(ev, DoneEvent):
                _record(state, ev.result)  # here, not in the consumer: aborted rows count too
            with contextlib.suppress(RuntimeError):  # the event loop is gone (shutdown)
                loop.call_soon_threadsafe(queue.put_nowait, (i, ev))
        return on_event

    reqs = [Request(seq=s, on_event=listener(i), logprobs=logprobs) for i, s in enumerate(seqs)]
    try:
        state.scheduler.submit_all(reqs)
    except QueueFull as e:
        raise APIError(429, f"{e}; retry after {state.config.retry_after_s}s", type="rate_limit_error",
                       code="queue_full", headers={"Retry-After": str(state.config.retry_after_s)}) from e
    return Job(state, reqs, queue, t0, headers, degraded=degraded)


def _encode(encode: Callable[[str | None], Prompt], instruction: str | None) -> Prompt:
    try:
        return encode(instruction)
    except TypedLMError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. a chat template that rejects this message order
        raise APIError(400, f"messages cannot be rendered with the model's chat template: "
                            f"{type(e).__name__}: {e}", param="messages") from e


def _record(state: ServerState, res: GenerationResult) -> None:
    m = state.metrics
    m.prompt_tokens.inc(res.prompt_tokens)
    m.completion_tokens.inc(res.completion_tokens)
    m.finished.labels(res.finish_reason, res.constraint or "none").inc()


def _build(state: ServerState, prompt: Prompt, params: SamplingParams, constraint, n: int, compiled=None):
    engine, ids = state.engine, prompt.ids
    if compiled is None and constraint is not None and constraint.lenient:  # relaxed tools: the Warning header
        compiled, _ = engine.grammars.compile(constraint, warn=False)      # names the places, no Python warning
    out = []
    for i in range(n):
        p = params if params.seed is None or i == 0 else replace(params, seed=params.seed + i)
        out.append(build_sequence(engine, ids, p, constraint, compiled=compiled, **prompt.seq_kw))
    return out
