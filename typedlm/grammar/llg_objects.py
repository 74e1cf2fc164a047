"""Object keywords llguidance does not read, rewritten into ones it does, exactly.

Without these, ``auto`` hands the whole schema to xgrammar, whose mask precompute takes seconds on
large schemas. Each rewrite takes one core-form object node
whose children are already adapted (:func:`.llg._adapt`) and returns a node meaning exactly the same:

- ``minProperties`` / ``maxProperties`` beside optional listed keys (llguidance counts only when every
  listed key is required): a disjunction over which optional keys are present, each branch with those
  required and the others ``false`` (absent), the counts kept where unlisted keys may still come
  (:func:`counted_object`). At most :data:`MAX_COUNT_BRANCHES` branches, else declined.
- ``propertyNames`` (an ``enum`` of names, a string ``pattern`` or lengths) over an otherwise open map: the
  names as one ``patternProperties`` entry carrying ``additionalProperties``, and no other key
  (:func:`named_properties`); a listed key the names exclude becomes ``false``.

A listed key whose schema accepts nothing (``false``, ``{"anyOf": []}``) is an absent key; llguidance
reads ``false`` as that, and counts such keys as it counts required ones.
"""

from __future__ import annotations

from itertools import combinations
from math import comb
from typing import Any, Iterator

MAX_COUNT_BRANCHES = 64  # beyond: declined, and auto takes xgrammar

Node = dict[str, Any]


def _nothing(schema: Any) -> bool:
    return schema is False or schema == {"anyOf": []}


def _extras_possible(node: Node) -> bool:
    """Whether keys beyond ``properties`` may appear: a pattern, or an ``additionalProperties`` not nothing."""
    return bool(node.get("patternProperties")) or not _nothing(node.get("additionalProperties", True))


def counted_object(node: Node, decline) -> Node:
    """``node`` without ``minProperties``/``maxProperties`` beside optional keys (module docstring);
    ``decline(reason)`` raises where the branches would be too many."""
    if ("minProperties" not in node and "maxProperties" not in node) or node.get("type") != "object":
        return node
    props: dict[str, Any] = node.get("properties", {})
    absent = {k for k, s in props.items() if _nothing(s)}
    required = [k for k in node.get("required", []) if k not in absent]
    optional = [k for k in props if k not in absent and k not in required]
    lo, hi = node.get("minProperties", 0), node.get("maxProperties")
    extras = _extras_possible(node)
    fixed = len(set(required))
    if any(_nothing(props.get(k, True)) for k in node.get("required", [])):
        return {**({"$defs": node["$defs"]} if "$defs" in node else {}), "anyOf": []}  # a required key that cannot be there
    present_sets = list(_present_sets(optional, lo - fixed, None if hi is None else hi - fixed, extras, decline))
    branches = []
    for present, gone, counts in present_sets:
        out = {k: v for k, v in node.items() if k not in ("minProperties", "maxProperties", "$defs")}
        out["properties"] = {k: (False if k in gone or k in absent else s) for k, s in props.items()}
        named = set(required) | set(present)
        order = [k for k in props if k in named] + [k for k in node.get("required", []) if k not in props]
        if order:
            out["required"] = order
        else:
            out.pop("required", None)
        if counts:
            out.update({k: node[k] for k in ("minProperties", "maxProperties") if k in node})
        branches.append(out)
    if len(branches) == 1:
        only = branches[0]
    else:
        only = {"anyOf": branches}  # none: no object fits
    return {**({"$defs": node["$defs"]} if "$defs" in node else {}), **only}


def _present_sets(optional: list[str], need: int, room: int | None, extras: bool,
                  decline) -> Iterator[tuple[tuple[str, ...], set[str], bool]]:
    """``(present, absent, counts)`` per branch: ``present`` optional keys required there, ``absent`` ones
    ``false``, the rest left optional; ``counts``: the branch keeps min/maxProperties (its listed keys are
    then all required or absent). ``need``/``room``: how many more keys must / may come beyond the
    required ones."""
    if room is not None and room < 0:
        return
    if room is None:  # a minimum only: by the first ``need`` optional keys present (then the rest is free)
        yield from _at_least(tuple(optional), max(0, need), extras, decline)
        return
    sizes = range(max(0, need) if not extras else 0, min(room, len(optional)) + 1)
    total = sum(comb(len(optional), j) for j in sizes)
    if total > MAX_COUNT_BRANCHES:
        decline(f"min/maxProperties beside {len(optional)} optional keys: {total} branches")
    for j in sizes:
        for present in combinations(optional, j):
            yield present, set(optional) - set(present), extras


def _at_least(keys: tuple[str, ...], need: int, extras: bool, decline, budget: list[int] | None = None):
    """Branches where at least ``need`` of ``keys`` are present, or unlisted keys make up the rest."""
    budget = [MAX_COUNT_BRANCHES] if budget is None else budget
    if need == 0:
        yield (), set(), False
        return
    for i, key in enumerate(keys):  # ``key`` is the first present one: the keys before it are absent
        for present, gone, counts in _at_least(keys[i + 1:], need - 1, extras, decline, budget):
            budget[0] -= 1
            if budget[0] < 0:
                decline(f"minProperties beside {len(keys)} optional keys: too many branches")
            yield (key, *present), set(keys[:i]) | gone, counts
    if extras:  # none of ``keys`` present: unlisted keys count
        yield (), set(keys), True


def named_properties(node: Node, anchored, decline) -> Node:
    """``node`` without ``propertyNames`` (module docstring), or ``decline(reason)``."""
    names = node.get("propertyNames")
    if names is None:
        return node
    if node.get("patternProperties"):
        decline("propertyNames beside patternProperties")
    props: dict[str, Any] = node.get("properties", {})
    other = node.get("additionalProperties", True)
    if isinstance(names, dict) and "enum" in names and set(names) <= {"enum", "type"}:
        allowed = [n for n in names["enum"] if isinstance(n, str)]
        fits = (lambda k: k in allowed)
        unlisted = [n for n in allowed if n not in props]
        pattern = anchored("|".join(_escaped(n) for n in unlisted)) if unlisted else None
    elif isinstance(names, dict) and names.get("type", "string") == "string" and not props \
            and (set(names) <= {"type", "pattern"} or set(names) <= {"type", "minLength", "maxLength"}):
        fits, pattern = (lambda k: False), names.get("pattern") or _lengths(names)  # a pattern: adapted (anchored)
    else:
        decline("propertyNames other than an enum of names, or a pattern over unlisted keys")
    out = {k: v for k, v in node.items() if k not in ("propertyNames", "additionalProperties")}
    if props:
        out["properties"] = {k: (s if fits(k) else False) for k, s in props.items()}
    if pattern is not None and not _nothing(other):
        out["patternProperties"] = {pattern: other}
    out["additionalProperties"] = False
    return out


def _lengths(names: Node) -> str:
    """A name of ``minLength``..``maxLength`` characters (code points, as JSON Schema counts them)."""
    hi = names.get("maxLength")
    return f"^[\\s\\S]{{{names.get('minLength', 0)},{'' if hi is None else hi}}}$"


def _escaped(name: str) -> str:
    """``name`` as a regex matching itself (only the metacharacters escaped: Rust rejects other escapes)."""
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$" else c for c in name)
