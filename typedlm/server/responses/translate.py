"""/v1/responses (the OpenAI Responses API) on the chat pipeline: the request body, its translation to
a :class:`~typedlm.server.protocol.ChatRequest`, and the output items of a finished choice.

Stateless: nothing is stored (the response says ``"store": false``); ``previous_response_id``,
``conversation`` and ``item_reference`` inputs are a 400 asking for the whole conversation in ``input``.

Translation (``to_chat``):

  ==============================  ==========================================================
  Responses                        chat
  ==============================  ==========================================================
  ``instructions``                 a first system message
  ``input`` string                 one user message
  message items (any role)         messages; ``input_text`` / ``output_text`` / ``refusal``
                                   parts become text (images, files, audio: 400)
  ``function_call`` items          the preceding assistant message's ``tool_calls``
  ``function_call_output``         a ``tool`` message answering ``call_id``
  ``reasoning`` items              ``reasoning_content`` of the next assistant message
  ``text.format``                  ``response_format`` (json_schema with ``strict``, json_object, text)
  function ``tools``, ``tool_choice``  the same, flattened (other tool types: 400)
  ``max_output_tokens``            ``max_completion_tokens`` (over the context: 400 naming it)
  ``reasoning.effort``             ``reasoning_effort``
  ==============================  ==========================================================
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from .errors import APIError
from .protocol import ChatRequest, without_documented
from .tools import parse_calls

_NONE = (None,)
# documented Responses fields typedlm does not implement: field -> (no-op values, reason)
DOCUMENTED: dict[str, tuple[tuple, str]] = {
    "store": ((None, False), "typedlm stores no responses (stateless): set store to false or leave it out"),
    "background": ((None, False), "background responses are not supported"),
    "service_tier": ((None, "auto", "default"), "there are no service tiers"),
    "truncation": ((None, "disabled"), "inputs are never truncated (too long is a 400)"),
    "top_logprobs": ((None, 0), "logprobs are not supported on /v1/responses: use /v1/chat/completions"),
    "max_tool_calls": (_NONE, "max_tool_calls is not supported"),
    "prompt": (_NONE, "stored prompts are not supported"),
    "context_management": (_NONE, "server-side context management is not supported"),
    "prompt_cache_retention": (_NONE, "there is no prompt cache to configure"),
    "prompt_cache_options": (_NONE, "there is no prompt cache to configure"),
    "moderation": (_NONE, "moderation is not supported"),
    "previous_response_id": (_NONE, "typedlm keeps no responses (stateless): send the whole conversation in 'input'"),
    "conversation": (_NONE, "typedlm keeps no conversations (stateless): send the whole conversation in 'input'"),
}
# include values with nothing to add: reasoning items always carry their text in the clear
INCLUDE_NOOP = {"reasoning.encrypted_content"}
TEXT_PARTS = {"input_text", "output_text", "text", "refusal", "summary_text", "reasoning_text"}


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    text: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    metadata: dict[str, str] | None = None  # echoed back
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _documented(cls, data):
        if isinstance(data, dict):
            data = without_documented(data, DOCUMENTED)
            bad = sorted(set(data.get("include") or ()) - INCLUDE_NOOP)
            if bad:
                raise PydanticCustomError("unsupported_field", "include: {bad} is not supported",
                                          {"bad": ", ".join(bad)})
            unknown = sorted(set(data.get("stream_options") or {}) - {"include_obfuscation"})
            if unknown:
                raise PydanticCustomError("unsupported_field", "stream_options: unknown field(s) {f}",
                                          {"f": ", ".join(unknown)})
        return data


# -- request -> chat -------------------------------------------------------------------------------
def to_chat(body: ResponsesRequest) -> ChatRequest:
    """The equivalent chat request (400 naming the Responses field for what has no equivalent)."""
    chat: dict[str, Any] = {"model": body.model, "messages": _messages(body), "temperature": body.temperature,
                            "top_p": body.top_p, "parallel_tool_calls": body.parallel_tool_calls,
                            "max_completion_tokens": body.max_output_tokens}
    fmt = (body.text or {}).get("format")
    if fmt is not None:
        chat["response_format"] = _response_format(fmt)
    if body.tools:
        chat["tools"] = [_tool(i, t) for i, t in enumerate(body.tools)]
    if body.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(body.tool_choice)
    effort = (body.reasoning or {}).get("effort")
    if effort is not None:
        chat["reasoning_effort"] = effort
    try:
        return ChatRequest.model_validate(chat)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise APIError(400, f"{loc}: {first['msg']}", param=loc) from e


def _messages(body: ResponsesRequest) -> list[dict]:
    out: list[dict] = []
    if body.instructions:
        out.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        return out + [{"role": "user", "content": body.input}]
    reasoning: list[str] = []
    for i, item in enumerate(body.input):
        kind = item.get("type", "message" if "role" in item else None)
        where = f"input[{i}]"
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise APIError(400, f"{where}.role {role!r} is not one of user, system, developer, assistant",
                               param=f"{where}.role")
            msg = {"role": role, "content": _text(item.get("content"), f"{where}.content")}
            if role == "assistant" and reasoning:
                msg["reasoning_content"], reasoning = "\n".join(reasoning), []
            out.append(msg)
        elif kind == "function_call":
            call = {"id": _need(item, "call_id", where), "type": "function",
                    "function": {"name": _need(item, "name", where), "arguments": _need(item, "arguments", where)}}
            last = out[-1] if out else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                out.append(last)
            last.setdefault("tool_calls", []).append(call)
            if reasoning:
                last["reasoning_content"], reasoning = "\n".join(reasoning), []
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": _need(item, "call_id", where),
                        "content": _text(item.get("output"), f"{where}.output")})
        elif kind == "reasoning":
            reasoning.append(_text(item.get("content") or item.get("summary") or [], f"{where}.content") or "")
        elif kind == "item_reference":
            raise APIError(400, f"{where}: item_reference needs stored items; typedlm is stateless: send the items "
                                "themselves", param=where)
        else:
            raise APIError(400, f"{where}: input item type {kind!r} is not supported (message, function_call, "
                                "function_call_output, reasoning)", param=f"{where}.type")
    return out


def _need(item: dict, key: str, where: str) -> str:
    v = item.get(key)
    if not isinstance(v, str):
        raise APIError(400, f"{where}.{key} must be a string", param=f"{where}.{key}")
    return v


def _text(content, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{where} must be a string or a list of content parts", param=where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise APIError(400, f"{where}[{j}]: content part type {kind!r} is not supported (text only)",
                           param=f"{where}[{j}].type")
        texts.append(part.get("refusal") if kind == "refusal" else part.get("text") or "")
    return "".join(texts)


def _response_format(fmt: dict) -> dict:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema":
        if "schema" not in fmt:
            raise APIError(400, "text.format.schema is required for json_schema", param="text.format.schema")
        js = {"name": fmt.get("name", "response"), "schema": fmt["schema"], "strict": fmt.get("strict") is True}
        return {"type": "json_schema", "json_schema": js}
    raise APIError(400, f"text.format.type {kind!r} is not one of text, json_object, json_schema",
                   param="text.format.type")


def _tool(i: int, t: dict) -> dict:
    if t.get("type") != "function":
        raise APIError(400, f"tools[{i}]: tool type {t.get('type')!r} is not supported (function tools only)",
                       param=f"tools[{i}].type")
    unknown = sorted(set(t) - {"type", "name", "description", "parameters", "strict"})
    if unknown:
        raise APIError(400, f"tools[{i}]: unknown field(s) {', '.join(unknown)}", param=f"tools[{i}]")
    fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if t.get(k) is not None}
    return {"type": "function", "function": fn}


def _tool_choice(tc) -> str | dict:
    if isinstance(tc, str):
        return tc
    if tc.get("type") != "function" or not isinstance(tc.get("name"), str):
        raise APIError(400, f"tool_choice {tc!r} is not supported: give none, auto, required or "
                            "{'type': 'function', 'name': ...}", param="tool_choice")
    return {"type": "function", "function": {"name": tc["name"]}}


# -- finished choice -> output items ---------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def message_item(text: str, status: str = "completed") -> dict:
    return {"id": new_id("msg"), "type": "message", "status": status, "role": "assistant",
            "content": [text_part(text)]}


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(text: str) -> dict:
    return {"id": new_id("rs"), "type": "reasoning", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}]}


def call_item(call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    return {"id": new_id("fc"), "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


def output_items(res, tools: bool, include_reasoning: bool = True) -> list[dict]:
    """A finished choice as Responses output items: reasoning, the message, each function call."""
    items = []
    if res.reasoning is not None and include_reasoning:
        items.append(reasoning_item(res.reasoning))
    content, calls = parse_calls(res.text, cut=res.finish_reason == "length") if tools else (res.text, [])
    if content:
        items.append(message_item(content, "incomplete" if res.finish_reason == "length" else "completed"))
    items += [call_item(new_id("call"), c.name, c.arguments) for c in calls]
    return items


def status_of(finish: str) -> tuple[str, dict | None, dict | None]:
    """(status, incomplete_details, error) of a response whose choice ended with ``finish``."""
    if finish == "length":
        return "incomplete", {"reason": "max_output_tokens"}, None
    if finish in ("error", "abort"):
        return "failed", None, {"code": "server_error", "message": f"generation ended with {finish}"}
    return "completed", None, None


def response_object(body: ResponsesRequest, rid: str, created: int, *, status: str, output: list[dict],
                    usage: dict | None, incomplete=None, error=None) -> dict:
    """The Response resource (also the snapshot in ``response.created`` / ``response.completed``)."""
    return {"id": rid, "object": "response", "created_at": created, "status": status, "model": body.model,
            "output": output, "instructions": body.instructions, "error": error, "incomplete_details": incomplete,
            "max_output_tokens": body.max_output_tokens, "parallel_tool_calls": body.parallel_tool_calls,
            "temperature": body.temperature, "top_p": body.top_p, "tool_choice": body.tool_choice or "auto",
            "tools": body.tools or [], "text": body.text or {"format": {"type": "text"}},
            "reasoning": body.reasoning, "metadata": body.metadata or {}, "store": False,
            "previous_response_id": None, "truncation": "disabled", "background": False,
            "service_tier": "default", "user": body.user, "usage": usage,
            **({"completed_at": int(time.time())} if status == "completed" else {})}


def responses_usage(results) -> dict:
    prompt = results[0].prompt_tokens if results else 0
    out = sum(r.completion_tokens for r in results)
    cached = results[0].cached_tokens if results else 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": sum(r.reasoning_tokens for r in results)},
            "total_tokens": prompt + out}
