"""``oneOf`` and the disjointness of alternatives: plain functions over branches (``algebra``: the run's
:class:`.algebra.Algebra`; ``builder``: its :class:`.build.Builder`)."""

from __future__ import annotations

from .refusal import Refuse, ptr
from .weaken import exactly


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
    out = []
    for i, a in enumerate(ds):
        part = a
        for j, b in enumerate(raw):
            if i != j and part and not apart(algebra, part, ds[j], p):
                part = algebra.minus(part, b, p, "oneOf")
        out.extend(part)
    return out
