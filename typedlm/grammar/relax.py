"""Superset schemas: relax only the keywords the grammar cannot enforce, keep the rest of the structure.

For a lenient ``json_schema`` (the Python API's ``lenient=True``, the CLI's ``--lenient``, a non-strict
``response_format`` or tool on the server) whose schema is refused, :func:`lenient_core` compiles a
superset: the normalizer's one relaxing pass (:func:`relaxed_core`, :mod:`.schema.weaken`) drops a
refused keyword where it is used positively and names every place it relaxed. The output is then
checked against the original schema with jsonschema (``schema_valid``), and the caller says so.

A refusal the pass only meets when emitting is relaxed in the schema text (:func:`_relax_one`) and the
pass run again. Polarity is what makes that sound too. The pointer is walked from the root through
positive applicators only (``properties``, ``patternProperties``, ``additionalProperties``, ``items``,
``prefixItems``, ``allOf``, ``anyOf``, ``then``, ``else``, ``dependentSchemas``, ``propertyNames``, and
``$ref``, whose target is inlined at the use site so other uses keep the original). At the deepest
subschema reached that way, one conjunct is dropped, which can only weaken it: the refused keyword
itself when the walk reached it, else the non-positive keyword the walk stopped at (the whole ``not`` /
``if`` + ``then`` + ``else`` / ``oneOf`` / ``contains`` + ``minContains`` + ``maxContains``). Where not
even that is possible, that subschema is replaced by ``true``. At most :data:`MAX_STEPS` such reruns.
"""

from __future__ import annotations

import copy

from ..errors import EmptySchemaError, GrammarCompileError
from .schema import prepare_relaxed, prepare_schema

MAX_STEPS = 64
_POSITIVE_MAP = {"properties", "patternProperties", "dependentSchemas"}
_KEEP = {"$defs", "definitions", "$id", "$anchor", "$dynamicAnchor"}  # dropping these changes what $ref means
_POSITIVE_LIST = {"prefixItems", "allOf", "anyOf"}
_POSITIVE_ONE = {"additionalProperties", "then", "else", "propertyNames", "unevaluatedProperties",
                 "unevaluatedItems", "additionalItems"}
_COMPANIONS = {"contains": ("contains", "minContains", "maxContains"),
               "minContains": ("contains", "minContains", "maxContains"),
               "maxContains": ("contains", "minContains", "maxContains"),
               "if": ("if", "then", "else")}


class RelaxedSchemaWarning(UserWarning):
    """A lenient json_schema compiled as a superset: the refused keywords were dropped (listed)."""


class NotRelaxable(Exception):
    """The refusal cannot be located in the schema (it stays a free-text degrade)."""


def relaxed_core(schema, registry=None, deadline: float | None = None,
                 automata: bool = True) -> tuple[dict, list[dict]]:
    """(core form of a superset of ``schema``, the relaxed places): one relaxing pass of the normalizer
    (:mod:`.schema.weaken`: a refused keyword dropped where it is met); a refusal it meets only when
    emitting is relaxed in the schema text (:func:`_relax_one`) and the pass run again."""
    work, places = copy.deepcopy(schema), []
    for _ in range(MAX_STEPS):
        try:
            core, done = prepare_relaxed(work, registry=registry, deadline=deadline, automata=automata)
            return core, places + done
        except GrammarCompileError as e:
            if not e.keyword or isinstance(e, EmptySchemaError):
                raise
            work, action = _relax_one(work, e.keyword, e.pointer if e.pointer != "/" else "")
            places.append({"keyword": e.keyword, "pointer": e.pointer or "/", "action": action})
            if work is True:
                return prepare_relaxed(True, registry=registry, deadline=deadline, automata=automata)[0], places
    raise NotRelaxable(f"more than {MAX_STEPS} keywords would have to be relaxed")


def lenient_core(schema, registry=None, deadline: float | None = None,
                 automata: bool = True) -> tuple[object, list[dict]]:
    """(core form, the relaxed places ``[{keyword, pointer, action}]``) of a lenient schema: its exact core
    form with no places where nothing is refused; else the superset's (:func:`relaxed_core`); a schema
    that cannot be relaxed (:class:`NotRelaxable`) comes back as given, with no places (not enforced,
    only validated after). GrammarCompileError for a failure that names no keyword."""
    try:
        return prepare_schema(schema, registry=registry, deadline=deadline, automata=automata), []
    except GrammarCompileError as e:
        if not e.keyword:
            raise
    try:
        return relaxed_core(schema, registry, deadline, automata)
    except NotRelaxable:
        return schema, []


def _segments(pointer: str) -> list[str]:
    if not pointer:
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.lstrip("/").split("/")]


def _relax_one(root, keyword: str, pointer: str):
    """Relax one refusal; returns (new root, what was done)."""
    if not isinstance(root, dict):
        raise NotRelaxable("the schema is not an object")
    segs = _segments(pointer)
    if segs and segs[-1] == keyword:
        segs = segs[:-1]
    holder, key = None, None  # where the current node lives: holder[key]
    node = root
    anchor = (None, None)  # the deepest node reached through positive applicators only (None: root)
    i = 0
    while i < len(segs):
        seg = segs[i]
        if not isinstance(node, dict):
            break
        if seg == "$ref" and isinstance(node.get("$ref"), str):
            target = _resolve(root, node["$ref"])
            if target is None:
                break
            inlined = {k: v for k, v in node.items() if k != "$ref"}
            inlined.setdefault("allOf", [])
            inlined["allOf"] = list(inlined["allOf"]) + [copy.deepcopy(target)]
            node = _put(root, holder, key, inlined)
            if holder is None:
                root = node
            holder, key, node = node["allOf"], len(node["allOf"]) - 1, node["allOf"][-1]
            anchor = (holder, key)
            i += 1
            continue
        if seg in _POSITIVE_MAP and i + 1 < len(segs) and isinstance(node.get(seg), dict) \
                and segs[i + 1] in node[seg]:
            holder, key = node[seg], segs[i + 1]
            i += 2
        elif seg in _POSITIVE_LIST and i + 1 < len(segs) and isinstance(node.get(seg), list) \
                and segs[i + 1].isdigit() and int(segs[i + 1]) < len(node[seg]):
            holder, key = node[seg], int(segs[i + 1])
            i += 2
        elif seg == "items" and isinstance(node.get("items"), list) and i + 1 < len(segs) \
                and segs[i + 1].isdigit() and int(segs[i + 1]) < len(node["items"]):
            holder, key = node["items"], int(segs[i + 1])
            i += 2
        elif (seg in _POSITIVE_ONE or seg == "items") and seg in node:
            holder, key = node, seg
            i += 1
        else:
            break  # not / if / oneOf / contains / anything else: no positive path beyond here
        node = holder[key]
        anchor = (holder, key)
    # ``node`` was reached positively: dropping any of its keywords (one conjunct) is a superset
    drop = keyword if i == len(segs) else segs[i]
    if isinstance(node, dict) and drop in node and drop not in _KEEP:
        for k in _COMPANIONS.get(drop, (drop,)):
            node.pop(k, None)
        return root, f"dropped '{drop}'"
    holder, key = anchor
    if holder is None:
        return True, "replaced the whole schema by true"
    holder[key] = True
    return root, "replaced by true"


def _put(root, holder, key, value):
    if holder is not None:
        holder[key] = value
    return value


def _resolve(root, ref: str):
    if not ref.startswith("#"):
        return None
    node = root
    for seg in _segments(ref[1:]):
        if isinstance(node, dict) and seg in node:
            node = node[seg]
        elif isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        else:
            return None
    return node
