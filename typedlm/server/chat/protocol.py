"""Request body of /v1/chat/completions: messages (as the SDKs send them, assistant turns sent back
whole included), tools, reasoning options, on top of :class:`~typedlm.server.protocol.GenerationRequest`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..protocol import GenerationRequest


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ToolCallFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: str  # a JSON object, as text (OpenAI shape)
    parsed_arguments: Any = None  # the SDK's .parse() helpers add it: derived from ``arguments``, not read


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction
    index: int | None = None  # streamed calls, accumulated by a client, keep their index


class Message(BaseModel):
    """A message as the SDKs send it, including an assistant message sent back whole
    (``message.model_dump()``): fields a response carries that add nothing to the prompt are accepted
    when null or empty (``audio``, ``function_call``) or always (``annotations``: citations of the
    content; ``parsed``: the content parsed by ``.parse()``); a non-null ``audio`` or ``function_call``
    would change the meaning, so it is a 400."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # assistant turns that called tools
    tool_call_id: str | None = None  # tool turns: the call this result answers
    reasoning_content: str | None = None  # assistant turns of a reasoning model (templates may use it)
    refusal: str | None = None  # an assistant refusal: its text is the turn's text when there is no content
    annotations: list[dict[str, Any]] | None = None
    parsed: Any = None
    audio: None = None
    function_call: None = None

    @model_validator(mode="before")
    @classmethod
    def _sent_back(cls, data):
        if isinstance(data, dict):
            if data.get("audio") is not None:
                raise PydanticCustomError("unsupported_field", "audio: audio messages are not supported",
                                          {"field": "audio"})
            if data.get("function_call") is not None:
                raise PydanticCustomError("unsupported_field", "function_call: the deprecated function_call is not "
                                          "supported: send the call in tool_calls", {"field": "function_call"})
        return data

    def text(self) -> str:
        content = self.content
        if isinstance(content, list):
            bad = [p.type for p in content if p.type != "text"]
            if bad:
                raise ValueError(f"message content part type {bad[0]!r} is not supported (text only)")
            content = "".join(p.text or "" for p in content)
        return content or self.refusal or ""


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionDef


class NamedToolChoiceFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: NamedToolChoiceFunction


class ChatRequest(GenerationRequest):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: dict[str, Any] | None = None  # passed to the chat template (e.g. enable_thinking)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    max_reasoning_tokens: int | None = Field(default=None, ge=0)
    include_reasoning: bool = True  # vLLM: false drops reasoning_content from the response

    @field_validator("tools")
    @classmethod
    def _tools(cls, v):
        if v is not None:
            if not v:
                raise ValueError("give at least one tool (or leave 'tools' out)")
            names = [t.function.name for t in v]
            if len(set(names)) != len(names):
                raise ValueError(f"tool names must be unique: {names}")
        return v
