"""The branches of one JSON type built from a translated schema object: plain functions, no state.

``number_branch`` (bounds, ``multipleOf``), ``string_branch`` (lengths, ``pattern``, ``format``),
``unique_items`` (``uniqueItems``: a finite array space as an enum, else a guarded array).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from .algebra import bound, check_array, check_string, fix_int
from .branches import Enum, Number, String, at, count, finite, is_num, same
from .formats import BOUNDED_URI, BOUNDED_URI_FORMATS, BOUNDED_URI_LENGTHS, LENGTHS as FORMAT_LENGTHS, NOT_EXACT
from .formats import PATTERNS as FORMAT_PATTERNS, XGRAMMAR, XGRAMMAR_NAME, known
from .refusal import Refuse, pattern_problem, ptr, rewrite_pattern

MAX_ENUM = 256  # the most arrays uniqueItems may enumerate


def number_branch(s, p: str, kind: str = "number"):
    """The ``number``/``integer`` branch of translated schema object ``s`` (or None: no number)."""
    b = Number(integer=kind == "integer", at=p)
    for kw, side, excl in (("minimum", "lo", False), ("exclusiveMinimum", "lo", True),
                           ("maximum", "hi", False), ("exclusiveMaximum", "hi", True)):
        if kw in s:
            if not is_num(s[kw]):
                raise Refuse(kw, at(s, p, kw), f"{kw} must be a number")
            b = bound(b, side, (s[kw], excl))
    if "multipleOf" in s:
        m = s["multipleOf"]
        if not is_num(m) or m <= 0:
            raise Refuse("multipleOf", ptr(p, "multipleOf"), "multipleOf must be a positive number")
        if float(m) != int(m):
            raise Refuse("multipleOf", ptr(p, "multipleOf"), "a non-integer multipleOf is not enforced")
        b = replace(b, integer=True, multiple_of=int(m) if int(m) != 1 else None)
    return fix_int(b)

def string_branch(s, p: str):
    """The ``string`` branch of translated schema object ``s``: lengths, the pattern rewritten for search
    semantics, a known format as its regex (or xgrammar's format), lengths it implies dropped."""
    b = {}
    if "minLength" in s and count(s["minLength"], "minLength", ptr(p, "minLength")) > 0:
        b["min_length"] = int(s["minLength"])
    if "maxLength" in s:
        b["max_length"] = count(s["maxLength"], "maxLength", ptr(p, "maxLength"))
    if "pattern" in s:
        rw = rewrite_pattern(s["pattern"])
        if rw is None:
            raise Refuse("pattern", ptr(p, "pattern"), pattern_problem(s["pattern"]))
        b["pattern"] = rw
    f = s.get("format")
    if "format" in s and not isinstance(f, str):
        raise Refuse("format", ptr(p, "format"), "format must be a string")
    if f is None or not known(f):
        pass  # an unknown format is an annotation: the validator ignores it
    elif f in FORMAT_PATTERNS and "pattern" in b:
        b["also"] = (FORMAT_PATTERNS[f],)  # both regexes' automata intersected (emit: strings.length_spec)
    elif f in FORMAT_PATTERNS:
        b["pattern"] = FORMAT_PATTERNS[f]
        if f in BOUNDED_URI_FORMATS and bounded_uri(b.get("min_length", 0), b.get("max_length")):
            b["pattern"] = BOUNDED_URI  # stricter, never looser: every string it admits has the lengths
            b.pop("min_length", None)
            b.pop("max_length", None)
    elif f in XGRAMMAR:
        b["format"] = XGRAMMAR_NAME.get(f, f)
    else:
        raise Refuse("format", ptr(p, "format"), f"format {f!r} {NOT_EXACT}")
    if f is not None and f in FORMAT_LENGTHS and ("pattern" in b or "format" in b):
        lo, hi = FORMAT_LENGTHS[f]
        if b.get("min_length", 0) <= lo:  # implied by the format: Pydantic's AnyUrl has minLength 1
            b.pop("min_length", None)
        if hi is not None and b.get("max_length", math.inf) >= hi:
            b.pop("max_length", None)
    return check_string(String(at=p, **b))


def bounded_uri(lo: int, hi: int | None) -> bool:
    """Whether a URI between lengths ``lo`` and ``hi`` is written as :data:`.formats.BOUNDED_URI` (every
    one of its strings lies within those lengths; the exact product would be too large)."""
    return hi is not None and lo <= BOUNDED_URI_LENGTHS[0] and hi >= BOUNDED_URI_LENGTHS[1]


def unique_items(b, p: str):
    """uniqueItems: over a small finite array space (every position an enum, boolean or null, and a
    bounded length) every array of distinct values, as an enum; else the array branch marked ``unique``
    (enforced beside the grammar at decode time, :mod:`typedlm.grammar.unique`)."""
    pre, items = b.prefix or [], b.items
    hi = b.max_items
    if items == []:
        hi = len(pre) if hi is None else min(hi, len(pre))
    guarded = check_array(replace(b, unique=True))
    if hi is None and items is not None and finite(items) is not None:
        hi = len(pre) + len(finite(items))  # distinct items from a finite set: no longer than that
        guarded = check_array(replace(b, unique=True, max_items=hi))
    if hi is None:
        return guarded
    pos = [finite(pre[i] if i < len(pre) else items) for i in range(hi)]
    if any(v is None for v in pos) or math.prod(max(1, len(v)) for v in pos) > 4096:
        return guarded
    arrays = []
    for k in range(b.min_items or 0, hi + 1):
        for combo in itertools.product(*pos[:k]):
            if all(not same(x, y) for i, x in enumerate(combo) for y in combo[i + 1:]):
                arrays.append(list(combo))
    if len(arrays) > MAX_ENUM:
        return guarded
    return Enum(arrays) if arrays else None
