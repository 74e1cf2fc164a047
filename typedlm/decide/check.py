"""The checks of a decision schema that ``typedlm validate`` prints and the playground runs as you type
(``POST /v1/decide/validate``): one function, so both say the same thing."""

from __future__ import annotations

from typing import Any

from .plan import SCORING_MODES, compile_plan
from .schema import DecisionSchema, lint


def unwrap(raw: Any) -> tuple[Any, list[str]]:
    """A preset-shaped object ``{"schema": {...}, "examples": [...]}`` -> (its schema, its examples)."""
    if isinstance(raw, dict) and "schema" in raw and "fields" not in raw:
        return raw["schema"], list(raw.get("examples") or [])
    return raw, []


def check_schema(raw: Any, tokenizer=None) -> tuple[DecisionSchema, dict]:
    """Parse + lint ``raw`` (a schema dict or a preset-shaped dict); with a tokenizer, also count the scored
    rows per scoring mode. Raises ``SchemaError`` naming the field and the problem."""
    schema = DecisionSchema.from_dict(unwrap(raw)[0])
    rows = {mode: len(compile_plan(tokenizer, schema, mode).rows) for mode in SCORING_MODES} if tokenizer else None
    return schema, {"valid": True, "fields": len(schema.fields), "warnings": lint(schema), "rows": rows}
