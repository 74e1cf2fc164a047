"""Relaxing inside the normalizer: where a keyword is refused, drop it from the schema object that uses
it *positively* and build that object again: one pass over the schema, a superset of what it accepts.

A relaxing run (``Normalizer(relax=True)``, a lenient ``json_schema``) builds every subschema that is
used positively (properties, items, ``allOf``/``anyOf`` members, ``$ref`` targets, ``then``/``else``,
...) under :func:`weakened`: a :class:`.refusal.Refuse` raised while building a schema object is
caught there, one conjunct of that object is removed (:func:`drop`) and the object is built again.
Dropping a conjunct can only let more instances through, so each object, and with it the whole
schema, becomes a superset of the original. Subschemas used negatively or both ways (``not``, the
``if`` condition, ``oneOf`` branches, which are complemented, ``contains``, which ``maxContains``
bounds) are built exactly (:func:`exactly`): a refusal there goes up
to the nearest positive object, which drops the keyword holding them. Companions go with a keyword
(``if`` with ``then``/``else``, ``contains`` with its counts, ``properties`` with
``additionalProperties``, ...): dropping one alone could make the object stricter. ``unevaluated*``
is dropped whenever anything of its object (or below it) was relaxed: it depends on what the other
keywords evaluated. Two drops are replacements, each a superset: ``oneOf`` becomes ``anyOf`` of its
branches, ``if``/``then``/``else`` becomes ``anyOf`` of ``then`` and ``else``.

A refusal met when emitting a positively used branch (a pattern's automaton times its lengths too large,
a ``contains`` counter or key classes past their size, ...) is relaxed there (:func:`loosened`): a string
without its lengths, else any value of the branch's type, both supersets. Emission inside ``contains``
classes and enum probes stays exact.

Every drop is recorded (``{"keyword", "pointer", "action"}``): the compiler names them in its
``RelaxedSchemaWarning``; the output is validated against the original schema after generation.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from .branches import any_
from .refusal import Refusal, Refuse, ptr

UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")
# dropping the key also drops these (one alone would make the object stricter)
_COMPANIONS = {
    "contains": ("minContains", "maxContains"), "minContains": ("contains", "maxContains"),
    "maxContains": ("contains", "minContains"), "properties": ("additionalProperties",),
    "patternProperties": ("additionalProperties",), "prefixItems": ("items",),
}
_KEEP = {"$defs", "definitions", "$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$schema"}


def _first_segment(pointer: str, base: str) -> str | None:
    """The keyword right below ``base`` on the way to ``pointer`` (unescaped), or None."""
    if not pointer.startswith(base + "/"):
        return None
    seg = pointer[len(base) + 1:].split("/", 1)[0]
    return seg.replace("~1", "/").replace("~0", "~")


def drop(raw: dict, p: str, refusal: Refusal, legacy_ref: bool) -> tuple[dict | bool, str]:
    """The schema object ``raw`` (at pointer ``p``) without the conjunct that ``refusal`` came through
    (or ``True`` where no conjunct can be named), and what was done, in words."""
    kw = _first_segment(refusal.pointer, p)
    if kw not in raw:
        kw = refusal.keyword if refusal.keyword in raw else None
    if kw is None or kw in _KEEP or (legacy_ref and "$ref" in raw):
        return True, "replaced by true"  # draft 4-7: $ref's siblings are ignored, dropping it would wake them
    member = _first_segment(refusal.pointer, ptr(p, kw))
    if kw == "allOf" and isinstance(raw["allOf"], list) and len(raw["allOf"]) > 1 and member is not None \
            and member.isdigit() and int(member) < len(raw["allOf"]):
        out = dict(raw)  # one conjunct of allOf
        out["allOf"] = [x for i, x in enumerate(raw["allOf"]) if i != int(member)]
        for other in UNEVALUATED:
            out.pop(other, None)
        return out, f"dropped allOf member {member}"
    out = {k: v for k, v in raw.items() if k != kw}
    if kw == "items" and isinstance(raw.get("items"), list):
        out.pop("additionalItems", None)  # drafts before 2020-12: items [..] with additionalItems
    for other in _COMPANIONS.get(kw, ()):
        out.pop(other, None)
    if kw not in UNEVALUATED:
        for other in UNEVALUATED:
            out.pop(other, None)
    action = f"dropped '{kw}'"
    if kw == "oneOf" and isinstance(raw["oneOf"], list):
        out["allOf"] = list(out.get("allOf") or []) + [{"anyOf": raw["oneOf"]}]
        action = "oneOf relaxed to anyOf"
    if kw == "if":
        out.pop("then", None)
        out.pop("else", None)
        if "then" in raw and "else" in raw:
            out["allOf"] = list(out.get("allOf") or []) + [{"anyOf": [raw["then"], raw["else"]]}]
            action = "if/then/else relaxed to anyOf [then, else]"
        else:
            action = "dropped 'if' with 'then'/'else'"
    return out, action


def weakened(builder, s: dict, p: str) -> list:
    """The branches of a positively used schema object ``s`` (at ``p``) in a relaxing run: built, and on a
    refusal built again without the conjunct it came through (:func:`drop`), until it builds. What an
    object became is kept (``builder.relaxed_forms``), so a parent's retry does not redo its drops."""
    original, places = s, []
    if id(s) in builder.relaxed_forms:  # built before (a parent's retry, a shared object): start from that
        s, places, first = builder.relaxed_forms[id(s)]
        places = [{**x, "pointer": p + x["pointer"][len(first):] if x["pointer"].startswith(first) else x["pointer"]}
                  for x in places]
        builder.n.relaxed.extend(places)
        builder.n.relax_events += bool(places)
    for _ in range(len(original) + 1):  # each retry drops at least one keyword
        if s is True:
            break
        mark = builder.n.mark()
        try:
            d = builder.norm_object(s, p)
            if places:
                builder.relaxed_forms[id(original)] = (s, places, p)
            return d
        except Refuse as r:
            builder.n.rollback(mark)
            s, action = drop(s, p, r.refusal, builder.n.draft.legacy_ref)
            places.append(place(r.refusal, action))
            builder.n.relaxed.append(places[-1])
            builder.n.relax_events += 1
    builder.relaxed_forms[id(original)] = (True, places, p)
    return any_()


@contextmanager
def exactly(builder):
    """Build subschemas that are complemented or bounded from above (``not``, ``if``, ``oneOf`` branches,
    ``contains``) exactly, even in a relaxing run: a weaker one would make the whole stricter."""
    builder.negative += 1
    try:
        yield
    finally:
        builder.negative -= 1


# a keyword refused when emitting -> the branch fields that drop it (and their companions), a superset
_LOOSER = {
    "minLength": {"min_length": None, "max_length": None}, "maxLength": {"min_length": None, "max_length": None},
    "pattern": {"also": (), "excluded": ()}, "contains": {"contains": ()},
    "minProperties": {"min_props": None, "max_props": None}, "maxProperties": {"min_props": None, "max_props": None},
    "multipleOf": {"multiple_of": None, "not_multiple_of": ()},
}


def loosened(emit, b, r: Refuse, relaxed: list) -> dict:
    """In a relaxing run: branch ``b`` whose emission (``emit(b)``) raised ``r``, emitted as a superset: without
    the refused keyword (:data:`_LOOSER`) where that emits, else ``{"type": ...}``; the place recorded in
    ``relaxed``."""
    kw = r.refusal.keyword
    looser = {k: v for k, v in _LOOSER.get(kw, {}).items() if hasattr(b, k)}
    if looser:
        try:
            out = emit(replace(b, **looser))
            relaxed.append(place(r.refusal, f"dropped '{kw}'"))
            return out
        except Refuse:
            pass
    relaxed.append(place(r.refusal, f"relaxed to any {b.type}"))
    return {"type": b.type}


def place(refusal: Refusal, action: str) -> dict:
    return {"keyword": refusal.keyword, "pointer": refusal.pointer or "/", "action": action}
