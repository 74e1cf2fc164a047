"""Constraint: the one normalized description of "what the output must match".

Every entry point (Python API, CLI, server) builds a :class:`Constraint` with :func:`make_constraint`;
the compiler turns it into a compiled grammar of one of its backends (:mod:`.backends`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
import json
from typing import Any

from pydantic import BaseModel

from ..errors import ConstraintError, EmptySchemaError, GrammarCompileError

ENGINES = ("handoff", "xgrammar", "llguidance", "auto")  # grammar engines (compiler.Grammars); None: the compiler's default
KINDS = ("json_object", "json_schema", "regex", "choice", "grammar", "lark", "structural_tag")

# Longest whitespace run allowed between JSON tokens when ``any_whitespace`` is on. Unbounded
# whitespace lets a model (a random-weight one does) emit spaces forever and never close the JSON.
# 16 fits a newline plus three levels of 4-space indentation.
MAX_WHITESPACE = 16


def canonical_json(value: Any) -> str:
    """The one serializer for cache keys, compiled schemas and prompts: compact, UTF-8 kept, key order
    kept (property order is meaningful: the grammar emits properties in schema order)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Constraint:
    kind: str
    value: Any = field(compare=False)  # schema dict | regex str | tuple[str, ...] | grammar text | tag dict
    any_whitespace: bool = True
    strict: bool = True  # json_schema: no properties/items beyond those the schema lists
    lenient: bool = False  # json_schema: compile even with keywords the grammar would not enforce
    engine: str | None = None  # grammar engine for this constraint (None: the compiler's), see compiler.Grammars
    key: str = ""  # canonical cache key, filled by make_constraint

    @property
    def schema(self) -> dict | None:
        """The JSON Schema the output is validated against, where there is one."""
        if self.kind == "json_schema":
            return self.value
        if self.kind == "json_object":
            return {"type": "object"}
        return None


def _schema_from(value: Any) -> dict:
    if isinstance(value, type):
        if issubclass(value, BaseModel):
            return value.model_json_schema()
        raise GrammarCompileError(f"json_schema class {value.__name__} is not a pydantic model")
    if isinstance(value, (bytes, str)):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise GrammarCompileError(f"json_schema is not valid JSON: {e}") from e
    if isinstance(value, bool):
        if value:
            return {}
        raise EmptySchemaError("json_schema is `false`: it accepts no output at all")
    if not isinstance(value, dict):
        raise GrammarCompileError(f"json_schema must be an object, got {type(value).__name__}")
    return value


def make_constraint(*, json_object: bool = False, json_schema: Any = None, regex: str | None = None,
                    choice: list[str] | tuple[str, ...] | None = None, grammar: str | None = None,
                    lark: str | None = None, structural_tag: Any = None, any_whitespace: bool = True,
                    strict: bool = True, lenient: bool = False, engine: str | None = None) -> Constraint | None:
    """Normalize exactly one constraint (or none). Two or more at once is a ConstraintError."""
    given = {"json_object": bool(json_object), "json_schema": json_schema is not None,
             "regex": regex is not None, "choice": choice is not None, "grammar": grammar is not None,
             "lark": lark is not None, "structural_tag": structural_tag is not None}
    named = [k for k, v in given.items() if v]
    if len(named) > 1:
        raise ConstraintError(f"give one constraint, not several: got {' and '.join(named)}")
    if not named:
        return None
    kind = named[0]
    opts = (any_whitespace, strict, lenient)
    if kind == "json_object":
        value: Any = {"type": "object"}
    elif kind == "json_schema":
        value = _schema_from(json_schema)
    elif kind == "choice":
        if isinstance(choice, str) or not all(isinstance(c, str) for c in choice):
            raise GrammarCompileError("choice must be a list of strings")
        value = tuple(choice)
        if not value:
            raise GrammarCompileError("choice list is empty")
        if "" in value:
            raise GrammarCompileError("choice list contains an empty string")
        if len(set(value)) != len(value):
            dup = next(c for c in value if value.count(c) > 1)
            raise GrammarCompileError(f"choice list repeats {dup!r}")
    elif kind == "structural_tag":
        value = structural_tag
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise GrammarCompileError(f"structural_tag is not valid JSON: {e}") from e
        if not isinstance(value, dict):
            raise GrammarCompileError("structural_tag must be a JSON object")
    else:  # regex, grammar, lark: text
        value = {"regex": regex, "grammar": grammar, "lark": lark}[kind]
        if not isinstance(value, str) or not value.strip():
            raise GrammarCompileError(f"{kind} must be a non-empty string")
    key = canonical_json([kind, value if not isinstance(value, tuple) else list(value), *opts])
    return with_engine(Constraint(kind, value, any_whitespace=any_whitespace, strict=strict, lenient=lenient, key=key),
                       engine)


def engine_key(engine: str, key: str) -> str:
    """The cache key of a constraint's ``key`` compiled by ``engine``."""
    return canonical_json([engine, key])


def with_engine(c: Constraint, engine: str | None) -> Constraint:
    """``c`` compiled by ``engine`` (one of :data:`ENGINES`; None: the compiler's default), else ConstraintError."""
    if engine is None:
        return c
    if engine not in ENGINES:
        raise ConstraintError(f"grammar engine {engine!r} is not one of {', '.join(ENGINES)}")
    base = c.key if c.engine is None else json.loads(c.key)[1]
    return replace(c, engine=engine, key=engine_key(engine, base))
