"""Request body of /v1/completions: one prompt string."""

from __future__ import annotations

from pydantic import Field, field_validator

from ..protocol import GenerationRequest


class CompletionRequest(GenerationRequest):
    prompt: str | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False

    @field_validator("echo")
    @classmethod
    def _echo(cls, v):
        if v:
            raise ValueError("echo is not supported")
        return v
