"""Request bodies of the OpenAI-compatible endpoints (pydantic v2). Unknown fields are a 400, so
nothing a client sends is silently ignored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)  # vLLM: -1 or 0 = off
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=16)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    user: str | None = None
    # structured outputs
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | bool | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _penalty(cls, v):
        if v != 0.0:
            raise ValueError("is not supported (only 0); use repetition_penalty")
        return v

    @field_validator("stream_options")
    @classmethod
    def _stream_options(cls, v):
        if v is not None:
            unknown = set(v) - {"include_usage", "continuous_usage_stats"}
            if unknown:
                raise ValueError(f"unknown field(s) {sorted(unknown)}")
        return v

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")  # name, tool_call_id, ... carry no meaning for us
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None

    def as_template_dict(self) -> dict:
        content = self.content
        if isinstance(content, list):
            bad = [p.type for p in content if p.type != "text"]
            if bad:
                raise ValueError(f"message content part type {bad[0]!r} is not supported (text only)")
            content = "".join(p.text or "" for p in content)
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": content or ""}


class ChatRequest(_Base):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class CompletionRequest(_Base):
    prompt: str | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False

    @field_validator("echo")
    @classmethod
    def _echo(cls, v):
        if v:
            raise ValueError("echo is not supported")
        return v
