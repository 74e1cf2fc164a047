"""``oneOf`` and the disjointness of alternatives: plain functions over branches (``algebra``: the run's
:class:`.algebra.Algebra`; ``builder``: its :class:`.build.Builder`).

``oneOf`` is ``anyOf`` where its branches exclude each other pairwise. A pair is told apart by a proof
from the branches' fields (:mod:`.exclusive`: types, ranges, lengths, tags, required-vs-forbidden keys),
by required tags on the schemas as written (:func:`discriminators`), or by an empty intersection;
otherwise each branch is narrowed by the complement of the other, ``A ∧ ¬B`` (:func:`minus`).
"""

from __future__ import annotations

from dataclasses import replace

from .branches import Array, Object, Ref, any_, is_any, same
from .exclusive import apart as proven_apart, excludes, position, value_of
from .refusal import Refuse, ptr
from .subsume import covers, identical, prune
from .weaken import exactly

MAX_REF_HOPS = 8  # $ref links followed to a branch's own schema object (the discriminator check)
MAX_CLOSED_KEYS = 4  # ¬additionalProperties: false spelled out over the subsets of at most this many keys


def disjoint(algebra, ds: list, p: str) -> bool:
    """Whether no instance matches two of the alternatives (as far as proofs and intersection can tell)."""
    return all(excludes(algebra.n, a, b) or apart(algebra, a, b, p) for i, a in enumerate(ds) for b in ds[i + 1:])


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
    algebra, n = builder.n.algebra, builder.n
    with exactly(builder):
        raw = [builder.norm(sub, ptr(p, i)) for i, sub in enumerate(subs)]
    ds = [algebra.intersect(context, d, p, "oneOf") for d in raw]
    tags = [discriminators(builder, sub, ptr(p, i)) for i, sub in enumerate(subs)]
    out = []
    for i, a in enumerate(ds):
        part = a
        for j, b in enumerate(raw):
            if (i != j and part and not told_apart(tags[i], tags[j]) and not excludes(n, part, ds[j])
                    and not apart(algebra, part, ds[j], p)):
                part = minus(n, part, b, p)
        out.extend(part)
    return out


def minus(n, x: list, d: list, p: str) -> list:
    """``x ∧ ¬d``, branch by branch: a branch of ``x`` proven apart from a branch of ``d`` keeps whole;
    otherwise it is met with the complement of that branch less the keywords it implies itself
    (:func:`narrowed`), which are often ones whose complement no branch can say."""
    out = []
    for c in x:
        part = [c]
        for b in expand(n, d):
            n.check_time()  # nested complements grow fast: the run's time limit holds here too
            kept = []
            for y in part:
                kept += [y] if proven_apart(n, y, b) else minus_branch(n, y, narrowed(n, y, b), p)
            part = prune(kept)
        out += part
    return prune(out)


def minus_branch(n, c, b, p: str) -> list:
    """``c ∧ ¬b`` for one branch each: ``c`` where one conjunct of ``b`` fails. A conjunct on a key's
    value or an item is negated within ``c``'s own schema for it (:func:`minus` again, so proofs and
    narrowing work at every depth); the rest by the algebra's complement."""
    algebra = n.algebra
    if isinstance(c, Object) and isinstance(b, Object):
        split = object_terms(n, c, b, p)
    elif isinstance(c, Array) and isinstance(b, Array):
        split = array_terms(n, c, b, p)
    else:
        split = None
    if split is None:
        return algebra.minus([c], [b], p, "oneOf")
    terms, others = split
    out = [x for t in terms for x in algebra.intersect([c], [t], p, "oneOf")]
    return prune(out + algebra.minus([c], [others], p, "oneOf"))


def object_terms(n, c: Object, b: Object, p: str):
    """(the failures of ``b``'s required keys, key values and closedness within ``c``; ``b`` with only its
    other keywords), or None where a value schema is unknown."""
    q = b.at or p
    terms = [Object(properties={r: []}, at=q, implied=frozenset([r])) for r in b.required]
    for k, d in b.properties.items():
        mine = value_of(n, c, k)
        if mine is None:
            return None
        rest = minus(n, mine, d, p) if mine else []
        if rest:
            terms.append(Object(properties={k: rest}, required=(k,), at=q, implied=frozenset([k])))
    others = replace(b, required=(), properties={k: any_() for k in b.properties})
    if b.additional == [] and not b.patterns and len(b.properties) <= MAX_CLOSED_KEYS:
        terms += outside(b, p)
        others = replace(others, additional=None)
    return terms, others


def array_terms(n, c: Array, b: Array, p: str):
    """(the failures of ``b``'s prefix and items within ``c``; ``b`` with only its other keywords), or None
    where items follow a prefix (in ``b``; or in ``c`` beside ``b``'s items: one item schema is not known)."""
    if (b.prefix and b.items is not None) or (b.items is not None and c.prefix):
        return None
    q = b.at or p
    terms = []
    for i, d in enumerate(b.prefix or []):
        rest = minus(n, position(c, i), d, p)
        if rest:
            terms.append(Array(prefix=[any_() for _ in range(i)] + [rest], min_items=i + 1, at=q))
    if b.items is not None:
        rest = minus(n, any_() if c.items is None else c.items, b.items, p)
        if rest:
            terms.append(Array(contains=((rest, 1, None),), at=q))
    return terms, replace(b, prefix=None, items=None)


def outside(b: Object, p: str) -> list:
    """Objects with a key closed object ``b`` does not list (``¬additionalProperties: false``): for each
    set S of ``b``'s keys, exactly those of them present and more than ``|S|`` keys in all."""
    names = list(b.properties)
    out = []
    for mask in range(2 ** len(names)):
        present = [k for i, k in enumerate(names) if mask >> i & 1]
        out.append(Object(properties={k: any_() if k in present else [] for k in names}, required=tuple(present),
                          min_props=len(present) + 1, at=b.at or p, implied=frozenset(present)))
    return out


def expand(n, d: list) -> list:
    """``d`` with each finished ``$ref`` branch replaced by its branches (a recursive one stays)."""
    out = []
    for b in d:
        target = n.memo.get(b.key) if isinstance(b, Ref) and b.key not in n.active else None
        out += [b] if target is None else target
    return out


def within(x, y) -> bool:
    """Whether every instance of branch list ``x`` is one of ``y`` (False: unsure)."""
    return x is not None and y is not None and (
        is_any(y) or identical(x, y) or all(any(covers(w, v) for w in y) for v in x))


def narrowed(n, c, b):
    """``b`` without the keywords that branch ``c`` implies: ``c ∧ ¬b`` is ``c ∧ ¬narrowed(c, b)``
    (``c`` holds each dropped conjunct of ``b`` already)."""
    if isinstance(c, Object) and isinstance(b, Object):
        return _narrowed_object(n, c, b)
    if isinstance(c, Array) and isinstance(b, Array):
        return _narrowed_array(c, b)
    return b


def _narrowed_object(n, c: Object, b: Object) -> Object:
    changes: dict = {"required": tuple(r for r in b.required if r not in c.required)}
    if b.min_props is not None and max(c.min_props or 0, len(set(c.required))) >= b.min_props:
        changes["min_props"] = None
    if b.max_props is not None and c.max_props is not None and c.max_props <= b.max_props:
        changes["max_props"] = None
    if b.names is not None and within(c.names, b.names):
        changes["names"] = None
    allowed = [k for k, v in c.properties.items() if v != []]
    if (c.additional == [] and not c.patterns
            and all(within(c.properties[k], value_of(n, b, k)) for k in allowed)):
        # every key c allows holds b's value schema for it: b's properties, patterns and
        # additionalProperties together (one conjunct: each present key's value) hold
        changes.update(properties={}, patterns=None, additional=None, implied=frozenset())
    else:
        changes["properties"] = {k: any_() if value_of(n, c, k) == [] or within(value_of(n, c, k), v) else v
                                 for k, v in b.properties.items()}
    return replace(b, **changes)


def _narrowed_array(c: Array, b: Array) -> Array:
    changes: dict = {}
    if b.unique and c.unique:
        changes["unique"] = False
    if b.min_items is not None and (c.min_items or 0) >= b.min_items:
        changes["min_items"] = None
    if b.max_items is not None and c.max_items is not None and c.max_items <= b.max_items:
        changes["max_items"] = None
    if b.prefix:
        changes["prefix"] = [any_() if within(position(c, i), d) else d for i, d in enumerate(b.prefix)]
    start = len(b.prefix or [])
    if b.items is not None and all(within(position(c, i), b.items) for i in range(start, max(start, len(c.prefix or [])) + 1)):
        changes["items"] = None  # every position from b's first unlisted one on holds b.items in c
    if b.contains and all(any(identical(x, y) for y in c.contains) for x in b.contains):
        changes["contains"] = ()
    return replace(b, **changes)


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
