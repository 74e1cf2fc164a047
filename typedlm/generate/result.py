"""GenerationResult: what one constrained (or free) generation returns. Keys pinned by a test."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import jsonschema

from ..grammar.schema.formats import FORMAT_CHECKER
from .sequence import Sequence


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" | "length" | "error" | "abort"
    prompt_tokens: int
    timings: dict
    constraint: str | None = None  # constraint kind, None for free text
    schema_valid: bool | None = None  # json_schema / json_object only
    schema_errors: list[str] = field(default_factory=list)
    error: str | None = None
    truncation_fallbacks: int = 0
    reasoning: str | None = None  # the text of the reasoning block (reasoning models), None without one
    reasoning_tokens: int = 0  # output tokens of the block, its end marker included
    forced_tokens: int = 0  # output tokens appended without sampling (jump-forward, forced end of reasoning)
    cached_tokens: int = 0  # prompt tokens read from the prefix cache (not computed again)

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens, "cached_tokens": self.cached_tokens}

    def json(self):
        """The text parsed as JSON (raises ValueError when it is not JSON)."""
        return json.loads(self.text)

    def to_dict(self) -> dict:
        return {"text": self.text, "token_ids": self.token_ids, "finish_reason": self.finish_reason,
                "usage": self.usage, "timings": self.timings, "constraint": self.constraint,
                "schema_valid": self.schema_valid, "schema_errors": self.schema_errors,
                "error": self.error, "truncation_fallbacks": self.truncation_fallbacks,
                "reasoning": self.reasoning, "reasoning_tokens": self.reasoning_tokens,
                "forced_tokens": self.forced_tokens}


def check_schema(text: str, schema: dict) -> tuple[bool, list[str]]:
    """Validate generated text against a JSON Schema (the draft its ``$schema`` names, default
    2020-12; every known format asserted under every draft, as the grammar enforces them:
    :data:`typedlm.grammar.schema.formats.FORMAT_CHECKER`). Returns (valid, reasons)."""
    try:
        instance = json.loads(text)
    except ValueError as e:
        return False, [f"not JSON: {e}"]
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator = cls(schema, format_checker=FORMAT_CHECKER)
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    except Exception as e:  # noqa: BLE001 - a schema jsonschema cannot evaluate is reported, not raised
        return False, [f"schema cannot be checked: {e}"]
    return not errors, [f"{'/'.join(map(str, e.absolute_path)) or '/'}: {e.message}" for e in errors[:5]]


def finish_result(seq: Sequence) -> GenerationResult:
    """The one finalizer every generation path goes through: text, stop-string cut, schema check."""
    answer, reasoning = seq.output_ids, None
    if seq.reasoning is not None:
        thought, answer = seq.reasoning.split(seq.output_ids)
        reasoning = seq.decode(thought)
    text = seq.decode(answer)
    if seq.stop_text_at is not None:
        text = text[: seq.stop_text_at]
    c = seq.constraint
    valid, errors = None, []
    if c is not None and c.schema is not None:
        valid, errors = check_schema(text, c.schema)
    return GenerationResult(text=text, token_ids=list(seq.output_ids), finish_reason=seq.finish_reason or "abort",
                            prompt_tokens=len(seq.prompt_ids), timings=seq.timings.as_dict(),
                            constraint=c.kind if c else None, schema_valid=valid, schema_errors=errors,
                            error=seq.error, truncation_fallbacks=seq.truncation_fallbacks, reasoning=reasoning,
                            reasoning_tokens=len(seq.output_ids) - len(answer) if reasoning is not None else 0,
                            forced_tokens=seq.forced_tokens, cached_tokens=seq.cached_tokens)
