"""The normalizer's representation: a schema is a list of *branches* (a disjunction), each a dict.

A branch is ``{"enum": [...]}``, ``{"$ref": key}`` (a recursive definition) or one JSON type with the
keywords of that type in normalized form: numbers ``lo``/``hi`` as ``(value, exclusive)``,
``multipleOf``, ``notMultipleOf`` (moduli it is not a multiple of), ``frac`` (non-integral);
strings ``minLength``/``maxLength``/``pattern``/``format``; arrays ``prefixItems``/``items`` (branch
lists), ``minItems``/``maxItems``, ``contains`` (``[(branches, min, max)]``); objects ``properties``/
``patternProperties``/``additionalProperties``/``propertyNames`` (branch lists), ``required``,
``minProperties``/``maxProperties``. ``[]`` accepts nothing; :func:`any_` everything.
"""

from __future__ import annotations

import math

from .refusal import TYPES, Refuse, ptr

NOTHING = {"anyOf": []}  # xgrammar: accepts no value (as a property: the key must be absent)
# bookkeeping keys of a branch (never emitted): "@" the pointer it came from; evaluated-ness for
# unevaluatedProperties ("evn" names, "evp" patterns, "eva" all) and unevaluatedItems ("evi": prefix
# length or True); "evx": annotations may be incomplete (anyOf), "evc": the contains schemas (their
# matches are evaluated items)
META = {"@", "evn", "evp", "eva", "evi", "evx", "evc"}


def any_() -> list[dict]:
    return [{"type": t} for t in TYPES]


def type_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def is_plain(b) -> bool:
    return set(b) - META == {"type"}


def is_any(d) -> bool:
    return len(d) >= len(TYPES) and set(TYPES) <= {b.get("type") for b in d if is_plain(b)}


def is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def count(v, kw, p) -> int:
    if not is_num(v) or v < 0 or float(v) != int(v):
        raise Refuse(kw, p, f"{kw} must be a non-negative integer")
    return int(v)


def same(a, b) -> bool:
    """JSON Schema equality: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) in (int, float) and type(b) in (int, float) and a == b or type(a) is type(b) and a == b


def finite(d):
    """The values of a finite branch list (enums, booleans, null), or None when it is infinite."""
    if d is None:
        return None
    out = []
    for b in d:
        if "enum" in b:
            out += b["enum"]
        elif b.get("type") == "boolean" and is_plain(b):
            out += [True, False]
        elif b.get("type") == "null" and is_plain(b):
            out.append(None)
        else:
            return None
    return out


def needs_escape(name: str) -> bool:
    return any(ch in '"\\' or ord(ch) < 0x20 for ch in name)


def at(s, p, kw, *rest) -> str:
    """The pointer of keyword ``kw`` of translated schema object ``s`` as the user wrote it."""
    return ptr(p, s.written(kw) if hasattr(s, "written") else kw, *rest)
