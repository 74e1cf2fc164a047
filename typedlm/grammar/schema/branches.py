"""The normalizer's representation: a schema is a list of *branches* (a disjunction; ``[]`` accepts
nothing, :func:`any_` everything), each a frozen dataclass of one kind:

- :class:`Enum` (its values), :class:`Ref` (a recursive definition, by key), :class:`Scalar`
  (``null`` or ``boolean``);
- :class:`Number` (``integer`` or not; bounds ``lo``/``hi`` as ``(value, exclusive)``, ``multiple_of``,
  ``not_multiple_of`` moduli, ``frac``: non-integral), :class:`String`, :class:`Array`,
  :class:`Object`: the keywords of their type, sub-schemas as branch lists, ``None`` when absent.

``at`` is the JSON pointer the branch came from (for refusals). :class:`Array` and :class:`Object`
also carry what ``unevaluatedItems``/``unevaluatedProperties`` need: which items/keys the
schema's parts evaluated, and ``partial`` (overlapping ``anyOf`` branches: unknown).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields

from .refusal import TYPES, Refuse, ptr

NOTHING = {"anyOf": []}  # xgrammar: accepts no value (as a property: the key must be absent)


@dataclass(frozen=True)
class Enum:
    values: list


@dataclass(frozen=True)
class Ref:
    key: int


@dataclass(frozen=True)
class Scalar:
    type: str  # null | boolean


@dataclass(frozen=True)
class Number:
    integer: bool = False
    lo: tuple | None = None
    hi: tuple | None = None
    multiple_of: int | None = None
    not_multiple_of: tuple = ()
    frac: bool = False
    at: str = ""

    @property
    def type(self) -> str:
        return "integer" if self.integer else "number"


@dataclass(frozen=True)
class String:
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None  # whole-match regexes (refusal.rewrite_pattern output)
    format: str | None = None
    at: str = ""
    also: tuple = ()  # further patterns the string matches too (an intersection)
    excluded: tuple = ()  # patterns the string does not match (a complement)
    type = "string"


@dataclass(frozen=True)
class Array:
    prefix: list | None = None  # branch lists, position by position
    items: list | None = None
    min_items: int | None = None
    max_items: int | None = None
    contains: tuple = ()  # (branches, minContains, maxContains or None), all must hold
    at: str = ""
    evaluated: int | bool = 0  # positions evaluated by prefixItems/items (True: all)
    contained: tuple = ()  # contains branches: the items they match are evaluated
    partial: bool = False
    unique: bool = False  # uniqueItems, enforced beside the grammar (:mod:`typedlm.grammar.unique`)
    type = "array"


@dataclass(frozen=True)
class Object:
    properties: dict = field(default_factory=dict)
    patterns: dict | None = None  # patternProperties: original pattern -> branches
    additional: list | None = None
    required: tuple = ()
    min_props: int | None = None
    max_props: int | None = None
    names: list | None = None  # propertyNames (string branches)
    at: str = ""
    evaluated_names: frozenset = frozenset()
    evaluated_patterns: tuple = ()
    evaluated_all: bool = False
    partial: bool = False
    implied: frozenset = frozenset()  # names in properties only because required lists them (they go last)
    type = "object"


TYPED = (Scalar, Number, String, Array, Object)
BOOKKEEPING = {"at", "integer", "type", "evaluated", "contained", "partial", "evaluated_names",
               "evaluated_patterns", "evaluated_all", "implied"}
KEYWORD = {"lo": "minimum", "hi": "maximum", "multiple_of": "multipleOf", "not_multiple_of": "multipleOf",
           "frac": "type", "min_length": "minLength", "max_length": "maxLength", "prefix": "prefixItems",
           "min_items": "minItems", "max_items": "maxItems", "patterns": "patternProperties",
           "additional": "additionalProperties", "min_props": "minProperties", "max_props": "maxProperties",
           "names": "propertyNames", "unique": "uniqueItems", "also": "pattern", "excluded": "pattern"}  # field -> the JSON Schema keyword it holds


def _keyword_defaults(cls) -> tuple:
    """``(field name, default)`` of each keyword field of branch class ``cls`` (computed once per class)."""
    out = _DEFAULTS.get(cls)
    if out is None:
        out = _DEFAULTS[cls] = tuple((f.name, f.default_factory() if f.default is MISSING else f.default)
                                     for f in fields(cls) if f.name not in BOOKKEEPING)
    return out


_DEFAULTS: dict[type, tuple] = {}


def keywords(b) -> list[str]:
    """The keyword fields of a typed branch that constrain it (set, not at their default)."""
    return [name for name, default in _keyword_defaults(type(b)) if getattr(b, name) != default]


# the keyword-free branch of each type: frozen, so one instance serves every use
_PLAIN = {"null": Scalar("null"), "boolean": Scalar("boolean"), "number": Number(), "integer": Number(integer=True),
          "string": String(), "array": Array(), "object": Object()}


_PLAIN_IDS = frozenset(map(id, _PLAIN.values()))


def plain(t: str):
    """The branch of JSON type ``t`` (or ``integer``) without keywords."""
    return _PLAIN[t]


def any_() -> list:
    return [_PLAIN[t] for t in TYPES]


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
    return isinstance(b, TYPED) and all(getattr(b, name) == default for name, default in _keyword_defaults(type(b)))


def is_any(d) -> bool:
    return len(d) >= len(TYPES) and set(TYPES) <= {b.type for b in d if id(b) in _PLAIN_IDS or is_plain(b)}


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
        if isinstance(b, Enum):
            out += b.values
        elif b == Scalar("boolean"):
            out += [True, False]
        elif b == Scalar("null"):
            out.append(None)
        else:
            return None
    return out


def needs_escape(name: str) -> bool:
    return any(ch in '"\\' or ord(ch) < 0x20 for ch in name)


def at(s, p, kw, *rest) -> str:
    """The pointer of keyword ``kw`` of translated schema object ``s`` as the user wrote it."""
    return ptr(p, s.written(kw) if hasattr(s, "written") else kw, *rest)
