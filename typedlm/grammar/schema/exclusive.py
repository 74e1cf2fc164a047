"""Proofs that two branches share no instance, read from their fields alone (no intersection is built).

:func:`excludes` answers True only where one reason holds for every pair of branches, and False when
unsure, so a ``oneOf`` compiled as ``anyOf`` on its word accepts exactly what the ``oneOf`` accepts.
The reasons (each one enough for a pair):

- different JSON types (``integer`` is a kind of ``number``: two number branches differ only by range,
  or by one being non-integral and the other integral);
- disjoint numeric ranges, string lengths, array lengths, property counts;
- enum/const values none of which the other branch can take (:func:`may_hold`);
- an object key one branch requires and the other forbids (``additionalProperties: false`` without it,
  or a property schema that matches nothing), or a key both require with exclusive values (a tag:
  ``const``/``enum`` on a required property, which OpenAPI's ``discriminator`` names);
- an array position both require with exclusive items.

``$ref`` branches are read through the run's memo; one still being built (recursive) is unknown.
"""

from __future__ import annotations

from fractions import Fraction
import math

from .branches import Array, Enum, Number, Object, Ref, String, any_, same, type_of
from .refusal import Refuse

MAX_DEPTH = 6  # nested keys/positions a proof descends into


def excludes(n, x: list, y: list, depth: int = 0) -> bool:
    """Whether no instance matches both branch lists ``x`` and ``y`` (False: unsure). ``n``: the run
    (:class:`.rewrites.Normalizer`)."""
    return all(apart(n, a, b, depth) for a in x for b in y)


def apart(n, a, b, depth: int = 0) -> bool:
    """Whether no instance matches both branches ``a`` and ``b`` (False: unsure)."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(a, Ref) or isinstance(b, Ref):
        ref, other = (a, b) if isinstance(a, Ref) else (b, a)
        target = n.memo.get(ref.key) if ref.key not in n.active else None
        if target is not None:
            return excludes(n, target, [other], depth + 1)
        mine, theirs = declared_types(n, ref), declared_types(n, other)
        return mine is not None and theirs is not None and not mine & theirs
    if isinstance(a, Enum) or isinstance(b, Enum):
        e, other = (a, b) if isinstance(a, Enum) else (b, a)
        if isinstance(other, Enum):
            return not any(same(v, w) for v in e.values for w in other.values)
        return not any(may_hold(v, other) for v in e.values)
    if a.type != b.type and not (isinstance(a, Number) and isinstance(b, Number)):
        return True
    if isinstance(a, Number):
        return (a.frac and b.integer) or (b.frac and a.integer) or ranges_apart(a.lo, a.hi, b.lo, b.hi)
    if isinstance(a, String):
        return counts_apart(a.min_length, a.max_length, b.min_length, b.max_length)
    if isinstance(a, Array):
        return arrays_apart(n, a, b, depth)
    if isinstance(a, Object):
        return objects_apart(n, a, b, depth)
    return False  # two Scalars of one type


def declared_types(n, b) -> set | None:
    """The JSON types (``integer`` as ``number``) every instance of branch ``b`` has; for a recursive
    ``$ref`` still being built, the ``type`` its schema object declares (None: unknown)."""
    if isinstance(b, Enum):
        return {type_of(v) for v in b.values}
    if not isinstance(b, Ref):
        return {b.type if b.type != "integer" else "number"}
    node = next((x for x in n.keep if id(x) == b.key[0]), None)
    if not isinstance(node, dict) or "$ref" in node or "type" not in node:
        return None  # beside a $ref, drafts before 2019-09 ignore 'type'
    t = node["type"] if isinstance(node["type"], list) else [node["type"]]
    return {"number" if x == "integer" else x for x in t if isinstance(x, str)}


def may_hold(v, b) -> bool:
    """Whether value ``v`` may match typed branch ``b`` (True: unsure)."""
    t = type_of(v)
    if isinstance(b, Ref):
        return True
    if isinstance(b, Number):
        if t != "number":
            return False
        if b.integer and float(v) != math.floor(v) or b.frac and float(v) == math.floor(v):
            return False
        return not ranges_apart((v, False), (v, False), b.lo, b.hi)
    if t != b.type:
        return False
    if isinstance(b, String):
        return not counts_apart(len(v), len(v), b.min_length, b.max_length)
    return True


def ranges_apart(alo, ahi, blo, bhi) -> bool:
    """Whether number ranges ``[alo, ahi]`` and ``[blo, bhi]`` (bounds ``(value, exclusive)`` or None)
    share no number."""
    return _below(ahi, blo) or _below(bhi, alo)


def _below(hi, lo) -> bool:
    if hi is None or lo is None:
        return False
    (h, he), (l, le) = hi, lo
    return Fraction(h) < Fraction(l) or (Fraction(h) == Fraction(l) and (he or le))


def counts_apart(alo, ahi, blo, bhi) -> bool:
    """Whether whole-number ranges ``[alo, ahi]`` and ``[blo, bhi]`` (None: open) are disjoint."""
    return (ahi is not None and (blo or 0) > ahi) or (bhi is not None and (alo or 0) > bhi)


def position(a: Array, i: int) -> list:
    """What item ``i`` must match in array branch ``a``."""
    if a.prefix is not None and i < len(a.prefix):
        return a.prefix[i]
    return any_() if a.items is None else a.items


def most_items(a: Array):
    """The most items array branch ``a`` can hold (None: no bound): ``maxItems``, or the first position
    that allows no item (``items: false`` after the prefix, or a prefix schema ``false``)."""
    prefix = a.prefix or []
    closed = next((i for i, d in enumerate(prefix) if d == []), len(prefix) if a.items == [] else None)
    return min((x for x in (a.max_items, closed) if x is not None), default=None)


def arrays_apart(n, a: Array, b: Array, depth: int) -> bool:
    if counts_apart(a.min_items, most_items(a), b.min_items, most_items(b)):
        return True
    both = min(a.min_items or 0, b.min_items or 0)  # positions every instance of both has
    return any(excludes(n, position(a, i), position(b, i), depth + 1) for i in range(both))


def value_of(n, b: Object, key: str):
    """What a value under ``key`` must match in ``b`` (None: unknown, where meeting patterns refuses)."""
    try:
        return n.builder.prop_schema(b, key)
    except Refuse:
        return None


def objects_apart(n, a: Object, b: Object, depth: int) -> bool:
    if counts_apart(max(a.min_props or 0, len(set(a.required))), a.max_props,
                    max(b.min_props or 0, len(set(b.required))), b.max_props):
        return True
    for x, y in ((a, b), (b, a)):
        if any(value_of(n, y, k) == [] for k in x.required):  # required here, forbidden there
            return True
    for k in dict.fromkeys(k for k in a.required if k in b.required):
        va, vb = value_of(n, a, k), value_of(n, b, k)
        if va is not None and vb is not None and excludes(n, va, vb, depth + 1):
            return True
    return False

