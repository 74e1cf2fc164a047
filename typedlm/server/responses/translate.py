"""/v1/responses on the chat pipeline: a :class:`~.protocol.ResponsesRequest` translated to the
equivalent :class:`~typedlm.server.chat.protocol.ChatRequest` (400 naming the Responses field for what has
no equivalent).

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

from typing import Any

from pydantic import ValidationError

from ..chat.protocol import ChatRequest
from ..errors import APIError
from .protocol import ResponsesRequest

TEXT_PARTS = {"input_text", "output_text", "text", "refusal", "summary_text", "reasoning_text"}
# a chat field an error names -> the Responses field it came from
FIELD_OF = {"messages": "input", "max_completion_tokens": "max_output_tokens", "reasoning_effort": "reasoning.effort",
            "response_format": "text.format"}


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
        loc = [str(x) for x in first["loc"]]
        loc = ".".join([FIELD_OF.get(loc[0], loc[0]), *loc[1:]]) if loc else "input"
        raise APIError(400, f"{loc}: {first['msg']}", param=loc) from e


def _messages(body: ResponsesRequest) -> list[dict]:
    if not body.input:
        raise APIError(400, "input is empty: give a string or at least one input item", param="input")
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
