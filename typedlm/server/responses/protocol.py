"""The Responses API's wire shapes: the request body (:class:`ResponsesRequest`; documented fields typedlm
does not implement are a 400 naming them) and the answer (the Response resource, its output items, usage).

Stateless: nothing is stored (the response says ``"store": false``); ``previous_response_id``,
``conversation`` and ``item_reference`` inputs are a 400 asking for the whole conversation in ``input``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ..chat.tools import parse_calls
from ..protocol import without_documented

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
                                          {"bad": ", ".join(bad), "field": "include"})
            unknown = sorted(set(data.get("stream_options") or {}) - {"include_obfuscation"})
            if unknown:
                raise PydanticCustomError("unsupported_field", "stream_options: unknown field(s) {f}",
                                          {"f": ", ".join(unknown), "field": "stream_options"})
        return data


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
