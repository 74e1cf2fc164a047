"""``unevaluatedProperties`` / ``unevaluatedItems`` after the in-place applicators: plain functions over
branches; ``n`` is the running normalizer (to build the sub-schema and intersect).
"""

from __future__ import annotations

import re
from dataclasses import replace

from .branches import Array, Enum, Object, Ref, is_any
from .refusal import Refuse


def unevaluated_properties(n, d: list, sub, q: str) -> list:
    """Apply ``unevaluatedProperties`` after the in-place applicators: on each object branch, to the
    keys no properties/patternProperties/additionalProperties of the branch's parts evaluated."""
    u = n.builder.norm(sub, q)
    out = []
    for b in d:
        _refuse_unknown_evaluation(b, dict, "unevaluatedProperties", q, "keys", "objects")
        if not isinstance(b, Object) or b.evaluated_all:
            out.append(b)
            continue
        if b.partial:
            raise Refuse("unevaluatedProperties", q, "anyOf branches that overlap: which of them "
                         "evaluated a key depends on the instance")
        props = {name: d if name in b.evaluated_names or any(re.search(pt, name) for pt in b.evaluated_patterns)
                 else n.algebra.intersect(d, u, q, "unevaluatedProperties") for name, d in b.properties.items()}
        b = n.builder.complete_object(replace(b, properties=props, additional=u, evaluated_all=True))
        if b is not None:
            out.append(b)
    return out

def unevaluated_items(n, d: list, sub, q: str) -> list:
    """Apply ``unevaluatedItems`` to the positions no prefixItems/items of the branch's parts evaluated."""
    u = n.builder.norm(sub, q)
    out = []
    for b in d:
        _refuse_unknown_evaluation(b, list, "unevaluatedItems", q, "items", "arrays")
        if not isinstance(b, Array) or b.evaluated is True:
            out.append(b)
            continue
        if b.partial:
            raise Refuse("unevaluatedItems", q, "overlapping anyOf branches: which items were evaluated "
                         "depends on the instance")
        ub = u + list(b.contained) if b.contained and not is_any(u) else u  # contains' matches are evaluated
        pre = [x if i < b.evaluated else n.algebra.intersect(x, ub, q, "unevaluatedItems")
               for i, x in enumerate(b.prefix or [])]
        out.append(replace(b, prefix=pre or None, evaluated=True,
                           items=n.algebra.meet_opt(b.items, ub, q, "unevaluatedItems")))
    return out


def _refuse_unknown_evaluation(b, kind: type, keyword: str, q: str, what: str, values: str) -> None:
    """``unevaluated*`` needs to know what a branch evaluated: not known through a recursive ``$ref`` or an
    enum of objects/arrays."""
    if isinstance(b, Ref) or (isinstance(b, Enum) and any(isinstance(v, kind) for v in b.values)):
        raise Refuse(keyword, q, f"which {what} were evaluated is unknown here "
                                 f"(a recursive $ref or an enum of {values})")
