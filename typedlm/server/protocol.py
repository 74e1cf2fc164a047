"""The request fields every generation endpoint shares (pydantic v2); each endpoint's own body is in its
folder (``chat/protocol.py``, ``completions/protocol.py``, ``responses/protocol.py``).

Field policy: nothing a client sends is silently ignored. A field is either

  * honoured (declared below), or
  * a documented OpenAI / vLLM field listed in :data:`DOCUMENTED`: accepted only with its no-op
    value (``store: false``, ``best_of: 1``, ...); any other value is a 400 naming the field and why;
  * anything else: a 400 ("Extra inputs are not permitted", naming the field).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

_NONE = (None,)
# documented OpenAI / vLLM request fields typedlm does not implement: field -> (no-op values, reason)
DOCUMENTED: dict[str, tuple[tuple, str]] = {
    # OpenAI
    "store": ((None, False), "typedlm stores no completions"),
    "metadata": ((None, {}), "metadata is for stored completions; typedlm stores none"),
    "service_tier": ((None, "auto", "default"), "there are no service tiers"),
    "modalities": ((None, ["text"]), "only text output is supported"),
    "audio": (_NONE, "audio output is not supported"),
    "prediction": (_NONE, "predicted outputs are not supported"),
    "web_search_options": (_NONE, "web search is not supported"),
    "functions": (_NONE, "the deprecated 'functions' field is not supported: use 'tools'"),
    "function_call": (_NONE, "the deprecated 'function_call' field is not supported: use 'tool_choice'"),
    "verbosity": ((None, "medium"), "verbosity is not supported"),
    "moderation": (_NONE, "moderation is not supported"),
    "prompt_cache_options": (_NONE, "there is no prompt cache to configure"),
    "prompt_cache_retention": (_NONE, "there is no prompt cache to configure"),
    # vLLM sampling / request extras
    "best_of": ((None, 1), "best_of > 1 is not supported: use n"),
    "use_beam_search": ((None, False), "beam search is not supported"),
    "min_p": ((None, 0, 0.0), "min_p is not supported: use top_p / top_k"),
    "length_penalty": ((None, 1, 1.0), "length_penalty only applies to beam search, which is not supported"),
    "stop_token_ids": ((None, []), "stop_token_ids is not supported: use stop strings"),
    "include_stop_str_in_output": ((None, False), "stop strings are never included in the output"),
    "ignore_eos": ((None, False), "ignore_eos is not supported"),
    "min_tokens": ((None, 0), "min_tokens is not supported"),
    "skip_special_tokens": ((None, True), "special tokens are always skipped"),
    "spaces_between_special_tokens": ((None, True), "spaces_between_special_tokens is not supported"),
    "truncate_prompt_tokens": (_NONE, "prompts are never truncated (too long is a 400)"),
    "prompt_logprobs": (_NONE, "prompt_logprobs is not supported"),
    "allowed_token_ids": (_NONE, "allowed_token_ids is not supported: use logit_bias or a grammar"),
    "bad_words": ((None, []), "bad_words is not supported: use logit_bias or a grammar"),
    "add_generation_prompt": ((None, True), "the generation prompt is always added"),
    "continue_final_message": ((None, False), "continue_final_message is not supported"),
    "add_special_tokens": ((None, False), "add_special_tokens is not supported for chat"),
    "documents": (_NONE, "documents (RAG templates) are not supported"),
    "chat_template": (_NONE, "a per-request chat_template is not supported: the model's own is used"),
    "mm_processor_kwargs": (_NONE, "multimodal inputs are not supported"),
    "guided_decoding_backend": ((None, "xgrammar"), "the only backend is xgrammar"),
    "guided_whitespace_pattern": (_NONE, "use structured_outputs.disable_any_whitespace"),
    "priority": ((None, 0), "request priorities are not supported"),
    "logits_processors": (_NONE, "per-request logits processors are not supported over HTTP"),
    "return_tokens_as_token_ids": ((None, False), "return_tokens_as_token_ids is not supported"),
    "cache_salt": (_NONE, "there is no prefix cache to salt"),
    "kv_transfer_params": (_NONE, "disaggregated prefill is not supported"),
    "vllm_xargs": (_NONE, "vllm_xargs is not supported"),
}
# identifiers that change nothing in the output (honoured by being accepted, like ``user``)
IDENTIFIERS = ("prompt_cache_key", "safety_identifier", "request_id")


def without_documented(data, documented: dict[str, tuple[tuple, str]]):
    """A request body without its documented-but-unimplemented fields, each checked to hold its no-op
    value (else the error naming the field and why)."""
    if not isinstance(data, dict):
        return data
    for name, (noop, reason) in documented.items():
        if name in data and data[name] not in noop:
            raise PydanticCustomError("unsupported_field", "{field}: {reason}", {"field": name, "reason": reason})
    return {k: v for k, v in data.items() if k not in documented}


class GenerationRequest(BaseModel):
    """The fields /v1/chat/completions and /v1/completions share: sampling, structured outputs, typedlm's
    extras; documented-but-unimplemented fields checked by :func:`without_documented`."""

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
    regex: str | None = None  # SGLang's top-level structured-output fields (typedlm.server.structured)
    ebnf: str | None = None
    json_schema: dict[str, Any] | str | None = None
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> bias in [-100, 100]
    jump_forward: bool | None = None  # typedlm: append grammar-forced text without sampling
    grammar_engine: Literal["handoff", "xgrammar", "llguidance", "auto"] | None = None  # typedlm: this request's engine
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    request_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _documented(cls, data):
        return without_documented(data, DOCUMENTED)

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, v):
        for k, b in (v or {}).items():
            if not k.lstrip("-").isdigit() or int(k) < 0:
                raise ValueError(f"key {k!r} is not a token id")
            if not -100.0 <= b <= 100.0:
                raise ValueError(f"bias {b} for token {k} is outside [-100, 100]")
        return v

    @property
    def logit_bias_pairs(self) -> tuple[tuple[int, float], ...]:
        return tuple((int(k), float(b)) for k, b in (self.logit_bias or {}).items())

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
