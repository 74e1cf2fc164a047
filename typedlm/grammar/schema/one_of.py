"""``oneOf`` and the disjointness of alternatives: plain functions over branches (``algebra``: the run's
:class:`.algebra.Algebra`; ``builder``: its :class:`.build.Builder`)."""

from __future__ import annotations

from .branches import same
from .refusal import Refuse, ptr
from .weaken import exactly

MAX_REF_HOPS = 8  # $ref links followed to a branch's own schema object (the discriminator check)


def disjoint(algebra, ds: list, p: str) -> bool:
    """Whether no instance matches two of the alternatives (as far as intersection can tell)."""
    return all(apart(algebra, a, b, p) for i, a in enumerate(ds) for b in ds[i + 1:])


def apart(algebra, a: list, b: list, p: str) -> bool:
    """Whether no instance matches both ``a`` and ``b`` (as far as intersection can tell)."""
    try:
        return not algebra.intersect(a, b, p, "oneOf")
    except Refuse:
        return False


def one_of(builder, subs: list, p: str, context: list) -> list:
    """``context ∧ oneOf(subs)``: each branch within ``context`` (where the instance is anyway), minus the
    branches it can overlap there (``A ∧ ¬B``; a pair that cannot overlap needs no complement). The
    branches are built exactly even in a relaxing run (they are complemented)."""
    algebra = builder.n.algebra
    with exactly(builder):
        raw = [builder.norm(sub, ptr(p, i)) for i, sub in enumerate(subs)]
    ds = [algebra.intersect(context, d, p, "oneOf") for d in raw]
    tags = [discriminators(builder, sub, ptr(p, i)) for i, sub in enumerate(subs)]
    out = []
    for i, a in enumerate(ds):
        part = a
        for j, b in enumerate(raw):
            if i != j and part and not told_apart(tags[i], tags[j]) and not apart(algebra, part, ds[j], p):
                part = algebra.minus(part, b, p, "oneOf")
        out.extend(part)
    return out


def discriminators(builder, sub, p: str) -> dict:
    """``{key: values}`` for each required key of object schema ``sub`` (``type: object``; its ``$ref`` s
    followed) whose property schema is a ``const`` or ``enum``: a branch's tags (OpenAPI's
    ``discriminator`` names one)."""
    for _ in range(MAX_REF_HOPS):
        if not (isinstance(sub, dict) and set(sub) <= {"$ref", "title", "description"} and "$ref" in sub):
            break
        try:
            sub = builder.lookup(sub["$ref"], p).contents
        except Refuse:
            return {}
    if (not isinstance(sub, dict) or "$ref" in sub or sub.get("type") not in ("object", ["object"])
            or not isinstance(sub.get("properties"), dict)):
        return {}  # a non-object passes required/properties (and a $ref's siblings may be ignored)
    out = {}
    for key in sub.get("required", []) if isinstance(sub.get("required"), list) else []:
        prop = sub["properties"].get(key)
        if isinstance(prop, dict) and "const" in prop:
            out[key] = [prop["const"]]
        elif isinstance(prop, dict) and isinstance(prop.get("enum"), list):
            out[key] = prop["enum"]
    return out


def told_apart(a: dict, b: dict) -> bool:
    """Whether two branches' tags (:func:`discriminators`) exclude each other: a key both require, with
    no value in common (no instance can match both)."""
    return any(not any(same(x, y) for x in a[k] for y in b[k]) for k in a.keys() & b.keys())
