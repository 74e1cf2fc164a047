"""Structured-output request fields -> one Constraint (or none), with the precedence and error policy.

Fields read (the highest present wins; every lower one is overridden, the winner is echoed in the
``X-TypedLM-Constraint`` response header):

  1. ``guided_grammar``, then SGLang's ``ebnf``            EBNF/GBNF text (root rule ``root``); a
                                                          ``guided_grammar`` with no ``name ::= ...``
                                                          rule is Lark (start rule ``start``), as vLLM
                                                          tells them apart (:func:`is_lark`)
  2. ``response_format: {type: json_schema}``             ``json_schema.{schema, strict, any_whitespace}``
     then ``guided_json``, then SGLang's ``json_schema``  (the same rank: "json_schema"; SGLang's is
                                                          a schema object or its JSON text)
  3. ``response_format: {type: json_object}``
  4. ``response_format: {type: structural_tag}``          xgrammar format, or vLLM's structures+triggers
  5. ``structured_outputs: {json | regex | choice | grammar | json_object | structural_tag,
     disable_any_whitespace}``                            exactly one kind inside it (``grammar``: EBNF
                                                          or Lark, as ``guided_grammar``)
  6. ``guided_regex``, then SGLang's ``regex``
  7. ``guided_choice``

Inside a rank the first one listed wins, as between ranks. SGLang's top-level ``regex`` / ``ebnf`` /
``json_schema`` are what SGLang's OpenAI server accepts (outlines' ``from_sglang`` sends them).

``response_format: {type: text}`` (or none) means no constraint.

Policy when the constraint cannot be compiled (``GrammarCompileError``):
  * explicit ones (``guided_*``, ``structured_outputs``, ``response_format`` structural_tag, and
    ``json_schema`` with ``strict: true``) -> HTTP 400 naming the reason;
  * a non-strict ``response_format`` (json_schema without ``strict: true``, json_object) -> degrade;
  * any structured request while ``TYPEDLM_GRAMMAR=0`` (``GrammarDisabled``) -> degrade.
A JSON Schema that is invalid against its own metaschema (``$schema``, else Draft 2020-12) is a 400
``invalid_json_schema`` naming the error and its place, whatever ``strict`` says (:func:`check_metaschema`).

Degrade = add an instruction carrying the schema, generate unconstrained, answer with
``Warning: 199 typedlm "response_format not enforced: <reason>"``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft202012Validator, validator_for

from ..errors import GrammarCompileError
from ..grammar.compiler import GrammarDisabled
from ..grammar.spec import Constraint, canonical_json, make_constraint, with_engine
from .errors import APIError

_COMMENT = re.compile(r"(#|//).*$")
PRECEDENCE = ("guided_grammar", "ebnf", "json_schema", "json_object", "structural_tag", "structured_outputs",
              "guided_regex", "regex", "guided_choice")


@dataclass(frozen=True)
class Structured:
    """What the request asked for: a constraint, where it came from, and whether failure is a 400."""

    constraint: Constraint | None
    source: str | None = None  # one of PRECEDENCE, None for free text
    explicit: bool = True  # compile failure -> 400 (True) or degrade (False)

    def instruction(self) -> str | None:
        """The text told to the model when the constraint is not enforced (degrade)."""
        c = self.constraint
        if c is None:
            return None
        if c.kind == "json_schema":
            return f"Respond only with JSON that conforms to this JSON Schema:\n{canonical_json(c.value)}"
        if c.kind == "json_object":
            return "Respond only with a JSON object."
        if c.kind == "regex":
            return f"Respond only with text that matches this regular expression: {c.value}"
        if c.kind == "choice":
            return "Respond with exactly one of: " + ", ".join(canonical_json(v) for v in c.value)
        if c.kind in ("grammar", "lark"):
            return f"Respond only with text that follows this grammar:\n{c.value}"
        return f"Respond following this output format:\n{canonical_json(c.value)}"


def resolve(body: Any) -> Structured:
    """The winning structured-output field of a chat/completions request body (a pydantic model), compiled
    by the request's ``grammar_engine`` (typedlm's field; None: the server's)."""
    picked = _pick(body)
    engine = getattr(body, "grammar_engine", None)
    if picked.constraint is None or engine is None:
        return picked
    return replace(picked, constraint=with_engine(picked.constraint, engine))


def _pick(body: Any) -> Structured:
    rf = body.response_format
    rf_type = rf.get("type") if isinstance(rf, dict) else None
    if rf is not None and not isinstance(rf, dict):
        raise APIError(400, "response_format must be an object", param="response_format")
    if rf_type not in (None, "text", "json_object", "json_schema", "structural_tag"):
        raise APIError(400, f"response_format.type {rf_type!r} is not one of text, json_object, json_schema, "
                            "structural_tag", param="response_format.type")
    so = body.structured_outputs
    if so is not None and not isinstance(so, dict):
        raise APIError(400, "structured_outputs must be an object", param="structured_outputs")

    with _param("guided_grammar"):
        if body.guided_grammar is not None:
            return Structured(make_constraint(**grammar_kind(body.guided_grammar)), "guided_grammar")
    with _param("ebnf"):
        if body.ebnf is not None:
            return Structured(make_constraint(grammar=body.ebnf), "ebnf")
    if rf_type == "json_schema":
        with _param("response_format.json_schema"):
            js = rf.get("json_schema")
            if not isinstance(js, dict) or "schema" not in js:
                raise APIError(400, "response_format.json_schema must be an object with a 'schema'",
                               param="response_format.json_schema")
            strict = js.get("strict") is True
            aw = js.get("any_whitespace", True)
            if not isinstance(aw, bool):
                raise APIError(400, "response_format.json_schema.any_whitespace must be a boolean",
                               param="response_format.json_schema.any_whitespace")
            check_metaschema(js["schema"], "response_format.json_schema.schema")
            return Structured(make_constraint(json_schema=js["schema"], any_whitespace=aw), "json_schema",
                              explicit=strict)
    for name in ("guided_json", "json_schema"):
        with _param(name):
            if getattr(body, name) is not None:
                check_metaschema(getattr(body, name), name)
                return Structured(make_constraint(json_schema=getattr(body, name), any_whitespace=_aw(body)),
                                  "json_schema")
    if rf_type == "json_object":
        return Structured(make_constraint(json_object=True), "json_object", explicit=False)
    if rf_type == "structural_tag":
        with _param("response_format"):
            return Structured(make_constraint(structural_tag=structural_tag(rf)), "structural_tag")
    if so is not None:
        return _structured_outputs(so)
    for name in ("guided_regex", "regex"):
        with _param(name):
            if getattr(body, name) is not None:
                return Structured(make_constraint(regex=getattr(body, name)), name)
    with _param("guided_choice"):
        if body.guided_choice is not None:
            return Structured(make_constraint(choice=body.guided_choice), "guided_choice")
    return Structured(None)


def _aw(body) -> bool:
    so = body.structured_outputs
    return not (isinstance(so, dict) and so.get("disable_any_whitespace") is True)


def _structured_outputs(so: dict) -> Structured:
    known = {"json", "regex", "choice", "grammar", "json_object", "structural_tag", "disable_any_whitespace",
             "whitespace_pattern"}
    unknown = sorted(set(so) - known)
    if unknown:
        raise APIError(400, f"structured_outputs has unknown field(s): {', '.join(unknown)}",
                       param="structured_outputs")
    dis = so.get("disable_any_whitespace", False)
    if not isinstance(dis, bool):
        raise APIError(400, "structured_outputs.disable_any_whitespace must be a boolean",
                       param="structured_outputs.disable_any_whitespace")
    if so.get("whitespace_pattern") is not None:
        raise APIError(400, "structured_outputs.whitespace_pattern is not supported: use disable_any_whitespace",
                       param="structured_outputs.whitespace_pattern")
    kw: dict[str, Any] = {}
    if so.get("json") is not None:
        check_metaschema(so["json"], "structured_outputs.json")
        kw["json_schema"] = so["json"]
    if so.get("json_object") not in (None, False):
        kw["json_object"] = True
    if so.get("regex") is not None:
        kw["regex"] = so["regex"]
    if so.get("choice") is not None:
        kw["choice"] = so["choice"]
    if so.get("grammar") is not None:
        kw.update(grammar_kind(so["grammar"]))
    if so.get("structural_tag") is not None:
        st = so["structural_tag"]
        kw["structural_tag"] = structural_tag(st) if isinstance(st, dict) else st
    if not kw:
        raise APIError(400, "structured_outputs names no constraint (json, regex, choice, grammar, json_object "
                            "or structural_tag)", param="structured_outputs")
    with _param("structured_outputs"):
        return Structured(make_constraint(any_whitespace=not dis, **kw), "structured_outputs")


def is_lark(text) -> bool:
    """Whether a grammar text is Lark rather than EBNF/GBNF: no line (outside ``#`` / ``//`` comments)
    defines a rule with ``::=`` (vLLM's test; outlines' CFG and vLLM's own examples send Lark)."""
    if not isinstance(text, str) or not text.strip():
        return False
    return not any("::=" in _COMMENT.sub("", line) for line in text.splitlines())


def grammar_kind(text) -> dict:
    """``make_constraint`` keywords of a grammar field: ``{"lark": text}`` or ``{"grammar": text}``."""
    return {"lark": text} if is_lark(text) else {"grammar": text}


def structural_tag(rf: dict) -> dict:
    """xgrammar's ``{type: structural_tag, format: {...}}`` as is; vLLM's legacy
    ``{structures: [{begin, schema, end}], triggers: [...]}`` converted to it."""
    if "format" in rf:
        return {"type": "structural_tag", "format": rf["format"]}
    if "structures" in rf:
        structures, triggers = rf.get("structures"), rf.get("triggers")
        if not isinstance(structures, list) or not isinstance(triggers, list) or not structures:
            raise GrammarCompileError("structural_tag needs a non-empty 'structures' list and a 'triggers' list")
        tags = []
        for s in structures:
            if not isinstance(s, dict) or not {"begin", "end"} <= set(s):
                raise GrammarCompileError("each structural_tag structure needs 'begin', 'schema' and 'end'")
            tags.append({"type": "tag", "begin": s["begin"], "end": s["end"],
                         "content": {"type": "json_schema", "json_schema": s.get("schema", {})}})
        return {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": triggers, "tags": tags}}
    raise GrammarCompileError("structural_tag needs a 'format' (xgrammar) or 'structures' + 'triggers' (vLLM)")


class _param:
    """Attach the request field name to errors raised while building its constraint."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if exc is None or isinstance(exc, APIError):
            return False
        if isinstance(exc, GrammarCompileError):
            raise APIError(400, f"{self.name}: {exc}", param=exc.pointer or self.name,
                           code="grammar_compile_error") from exc
        if isinstance(exc, ValueError):  # ConstraintError: several kinds at once, bad values
            raise APIError(400, f"{self.name}: {exc}", param=self.name) from exc
        return False


def check_metaschema(schema: Any, param: str) -> None:
    """400 ``invalid_json_schema`` when ``schema`` (an object, or its JSON text) is not valid against the
    metaschema of its ``$schema`` (default Draft 2020-12); the message names the error and its pointer."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return  # not JSON: make_constraint names that
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise APIError(400, f"{param}: a JSON Schema is an object or a boolean, not {type(schema).__name__}",
                       param=param, code="invalid_json_schema")
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as e:
        pointer = "".join(f"/{p}" for p in e.absolute_path)
        raise APIError(400, f"{param}: not a valid JSON Schema: {e.message} (at '{pointer or '/'}')",
                       param=param + pointer, code="invalid_json_schema") from e


def is_degradable(s: Structured, err: GrammarCompileError) -> bool:
    return isinstance(err, GrammarDisabled) or not s.explicit
