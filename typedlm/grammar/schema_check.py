"""Refusal layer: find every JSON Schema keyword xgrammar would not enforce, before compiling.

xgrammar silently ignores many keywords (``not``, ``if``/``then``/``else``, ``dependentRequired``,
``contains``, ``multipleOf``, type-specific keywords without ``type``, ...). A grammar that ignores a
keyword accepts instances the schema forbids, so we refuse such schemas and name the keyword and its
JSON pointer. This is an allow-list: every keyword of every subschema must be known to be enforced
(or be a pure annotation); anything unknown is refused.

:func:`prepare_schema` also makes the exact rewrites xgrammar needs (an unanchored ``pattern`` means
"contains a match", xgrammar matches it whole) and returns the schema to compile.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from ..errors import GrammarCompileError

ANNOTATIONS = {"$schema", "$id", "$comment", "title", "description", "default", "examples",
               "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "contentMediaType",
               "contentEncoding"}
GENERIC = {"type", "enum", "const", "anyOf", "allOf", "oneOf", "$ref"}
BY_TYPE = {
    "object": {"properties", "required", "additionalProperties", "minProperties", "maxProperties",
               "patternProperties"},
    "array": {"items", "prefixItems", "minItems", "maxItems"},
    "string": {"minLength", "maxLength", "pattern", "format"},
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
}
BY_TYPE["integer"] = BY_TYPE["number"]
TYPE_OF = {kw: t for t, kws in BY_TYPE.items() for kw in kws if t != "integer"}
# formats whose grammar xgrammar 0.2.9 enforces (measured: rejects a non-matching string)
ENFORCED_FORMATS = {"date", "date-time", "time", "email", "uuid", "ipv4", "ipv6", "uri", "hostname"}
JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


@dataclass(frozen=True)
class Refusal:
    keyword: str
    pointer: str
    reason: str

    def message(self) -> str:
        return f"keyword '{self.keyword}' at '{self.pointer or '/'}' is not enforced: {self.reason}"


def _ptr(parent: str, *parts) -> str:
    return parent + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


_ANCHOR_FREE = re.compile(r"^(?:[^\\^$]|\\.)*$")  # no unescaped ^ or $ anywhere
_LOOKAROUND = re.compile(r"\(\?[=!<]")


def _rewrite_pattern(p: str) -> str | None:
    """JSON Schema ``pattern`` is a search; xgrammar matches it whole. Return the whole-match regex
    accepting exactly the strings that contain a match, or None when we cannot say so exactly."""
    if _LOOKAROUND.search(p) or re.search(r"\\[bBAzZ]|\\\d", p):
        return None
    start = p.startswith("^")
    body = p[1:] if start else p
    end = body.endswith("$") and not body.endswith("\\$")
    body = body[:-1] if end else body
    if not _ANCHOR_FREE.match(body) or "|" in _top_level_alternation(body):
        return None
    any_ = r"[\s\S]*"
    return ("" if start else any_) + f"({body})" + ("" if end else any_)


def _top_level_alternation(body: str) -> str:
    """'|' if the regex has an alternation outside every group (anchors would bind to one branch)."""
    depth, i, in_class = 0, 0, False
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            return "|"
        i += 1
    return ""


class _Walker:
    def __init__(self, root: dict):
        self.root = root
        self.refusals: list[Refusal] = []

    def refuse(self, kw: str, ptr: str, reason: str) -> None:
        self.refusals.append(Refusal(kw, ptr, reason))

    def walk(self, s, ptr: str) -> None:
        if isinstance(s, bool):
            if s is False and ptr == "":
                self.refuse("false", ptr, "the schema accepts nothing")
            return
        if not isinstance(s, dict):
            self.refuse("(schema)", ptr, f"a subschema must be an object or boolean, got {type(s).__name__}")
            return
        types = s.get("type")
        if types is not None:
            tlist = types if isinstance(types, list) else [types]
            bad = [t for t in tlist if t not in JSON_TYPES]
            if bad or not tlist:
                self.refuse("type", _ptr(ptr, "type"), f"unknown type {bad or tlist}")
            tset = set(tlist)
        else:
            tset = None
        for kw, v in s.items():
            here = _ptr(ptr, kw)
            if kw in ANNOTATIONS:
                if kw in ("$defs", "definitions") and isinstance(v, dict):
                    for name, sub in v.items():
                        self.walk(sub, _ptr(here, name))
                continue
            if kw in GENERIC:
                self.generic(kw, v, s, here)
                continue
            owner = TYPE_OF.get(kw)
            if owner is None:
                self.refuse(kw, here, "xgrammar does not enforce this keyword")
                continue
            if tset is None:
                if "enum" in s or "const" in s:
                    self.refuse(kw, here, "type-specific keyword beside enum/const without 'type'")
                else:
                    self.refuse(kw, here, "type-specific keyword without 'type' is ignored by xgrammar")
                continue
            if owner not in tset and not (owner == "number" and "integer" in tset):
                continue  # keyword for a type the schema excludes: no effect in JSON Schema either
            self.typed(kw, v, s, here)

    def generic(self, kw, v, s, here):
        if kw in ("anyOf", "oneOf", "allOf"):
            if not isinstance(v, list) or not v:
                self.refuse(kw, here, "must be a non-empty array of schemas")
                return
            if kw == "oneOf" and len(v) > 1:
                self.refuse(kw, here, "oneOf with several branches is treated as anyOf by xgrammar")
            if kw == "allOf" and len(v) > 1:
                self.refuse(kw, here, "allOf with several parts is only partly enforced by xgrammar")
            for i, sub in enumerate(v):
                self.walk(sub, _ptr(here, i))
        elif kw == "$ref":
            if not isinstance(v, str) or not (v == "#" or v.startswith("#/")):
                self.refuse(kw, here, "only local references ('#/...') are supported")
            elif len(s.keys() - ANNOTATIONS - {"$ref"}) > 0:
                self.refuse(kw, here, "$ref beside other keywords is not enforced as an intersection")
            elif _resolve(self.root, v) is None:
                self.refuse(kw, here, f"reference {v!r} does not resolve")

    def typed(self, kw, v, s, here):
        if kw == "properties" and isinstance(v, dict):
            for name, sub in v.items():
                self.walk(sub, _ptr(here, name))
        elif kw == "patternProperties" and isinstance(v, dict):
            for name, sub in v.items():
                self.walk(sub, _ptr(here, name))
        elif kw in ("additionalProperties", "items"):
            self.walk(v, here)
        elif kw == "prefixItems" and isinstance(v, list):
            for i, sub in enumerate(v):
                self.walk(sub, _ptr(here, i))
        elif kw == "required":
            props = s.get("properties", {})
            missing = [r for r in v if r not in props] if isinstance(v, list) else []
            if missing:
                self.refuse(kw, here, f"required names not listed in 'properties': {missing}")
        elif kw in ("minLength", "maxLength") and ("pattern" in s or "format" in s):
            self.refuse(kw, here, "minLength/maxLength beside pattern/format is ignored by xgrammar")
        elif kw == "pattern":
            if not isinstance(v, str) or _rewrite_pattern(v) is None:
                self.refuse(kw, here, "pattern uses anchors, lookaround or escapes that cannot be enforced exactly")
        elif kw == "format" and v not in ENFORCED_FORMATS:
            self.refuse(kw, here, f"format {v!r} is not checked by xgrammar")


def _resolve(root, ref: str):
    node = root
    for part in ref[2:].split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def find_refusals(schema) -> list[Refusal]:
    """Every keyword in ``schema`` that the compiled grammar would not enforce."""
    w = _Walker(schema if isinstance(schema, dict) else {})
    w.walk(schema, "")
    return w.refusals


def _rewrite_patterns(s):
    if isinstance(s, dict):
        out = {}
        for k, v in s.items():
            if k in ("enum", "const", "default", "examples"):
                out[k] = v  # instance data, not subschemas
            elif k == "pattern" and isinstance(v, str):
                rw = _rewrite_pattern(v)
                out[k] = rw if rw is not None else v
            elif k in ("properties", "patternProperties", "$defs", "definitions") and isinstance(v, dict):
                out[k] = {name: _rewrite_patterns(sub) for name, sub in v.items()}
            else:
                out[k] = _rewrite_patterns(v) if isinstance(v, (dict, list)) else v
        return out
    if isinstance(s, list):
        return [_rewrite_patterns(x) for x in s]
    return s


def prepare_schema(schema: dict, *, lenient: bool = False) -> dict:
    """Refuse (unless lenient) what would not be enforced; return the exact rewrite to compile."""
    if not lenient:
        refusals = find_refusals(schema)
        if refusals:
            r = refusals[0]
            more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
            raise GrammarCompileError(r.message() + more, keyword=r.keyword, pointer=r.pointer or "/")
    return _rewrite_patterns(copy.deepcopy(schema))
