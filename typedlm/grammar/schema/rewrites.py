"""Normalize a JSON Schema into the *core form* xgrammar enforces exactly, or refuse.

Core form: a disjunction (``anyOf``) of branches; a branch is ``{"enum": [...]}`` or one JSON type
with only keywords xgrammar enforces for that type, or a ``$ref`` to a recursive definition.
Every rewrite is exact (the output accepts exactly the instances the input accepts, given that
xgrammar enforces the core keywords); where no exact rewrite exists, :class:`Refuse` names the
keyword and its JSON pointer. The rewrites (each pinned by tests/test_schema_rewrites.py):

- ``type`` split: a schema without ``type`` becomes one branch per JSON type, each carrying only its
  own keywords (``{"maximum": 3}`` accepts every non-number).
- ``enum``/``const`` filter: a schema with ``enum``/``const`` (or an ``allOf`` part with one) becomes
  the list of its values that jsonschema accepts against the whole subschema.
- ``allOf`` / ``$ref`` beside keywords: exact intersection of branches (bounds tightened, property
  schemas intersected, ``required`` united, items position by position).
- ``anyOf`` beside keywords: distributed over the branches.
- ``oneOf``: ``anyOf`` when its branches are pairwise disjoint, else ``(A ∧ ¬B) ∨ (¬A ∧ B)``.
- ``not``, ``if``/``then``/``else``: complement of type sets, numeric bounds, lengths, item and
  property counts, ``required`` and single ``properties``; ``(if ∧ then) ∨ (¬if ∧ else)``.
- ``dependentRequired`` / ``dependentSchemas``: ``(key absent) ∨ (key present ∧ dependency)``; an
  absent key is a property whose schema accepts nothing.
- ``required`` names missing from ``properties``: listed with the ``additionalProperties`` schema.
- ``multipleOf``: integral divisors on integers (a number multiple of an integer is an integer).
- integer bounds: made whole (``minimum: 1.5`` -> ``2``; exclusive bounds made inclusive).
- ``pattern`` / ``patternProperties``: search semantics and ECMA ``.`` (see refusal.rewrite_pattern).
- ``uniqueItems`` over a finite array space (positions that are enums/booleans/null, bounded
  length): the enum of every array of distinct values; on arrays of at most one item: dropped.
- ``contains`` with ``minContains: 0``,
  ``unevaluatedProperties``/``unevaluatedItems`` with no in-place applicator: dropped or turned into
  ``additionalProperties``/``items``, their exact meaning there.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import time
from fractions import Fraction

import jsonschema
import referencing
import referencing.exceptions

from ...errors import EmptySchemaError, GrammarCompileError
from .drafts import DEFAULT, draft_of, translate
from .keys import TooLarge, anything as any_key, lengths as key_lengths, names as key_names
from .keys import pattern as key_pattern, spec as key_spec
from .ebnf import contains_automaton
from .formats import LENGTHS as FORMAT_LENGTHS, NOT_EXACT, PATTERNS as FORMAT_PATTERNS, XGRAMMAR, known
from .refusal import JSON_TYPES, TYPES, Refusal, Refuse, ptr, rewrite_pattern

MAX_BRANCHES = 64  # a rewrite that needs more alternatives than this is refused (size, compile time)
MAX_ENUM = 256
MAX_PATTERNS = 4  # patternProperties: 2**n classes of keys
MAX_CONTAINS = 3  # contains on one array (allOf): 2**n classes of items
MAX_MODULUS = 1000  # integers by residue (a multipleOf complement): one grammar rule per residue
INTERNAL = "the schema could not be analysed (a typedlm bug; please report it)"  # the most arrays uniqueItems may enumerate
NOTHING = {"anyOf": []}  # xgrammar: accepts no value (as a property: the key must be absent)
APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "$ref", "$dynamicRef", "$recursiveRef", "dependentSchemas")
# validating keywords (2020-12 form, see drafts.translate) the normalizer handles; any other
# validating keyword is refused by name, and annotations never reach it
HANDLED = DEFAULT.validating | {"$recursiveRef"}


def _any() -> list[dict]:
    return [{"type": t} for t in TYPES]


def _type_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


# bookkeeping keys of a branch (never emitted): "@" the pointer it came from; evaluated-ness for
# unevaluatedProperties ("evn" names, "evp" patterns, "eva" all) and unevaluatedItems ("evi": prefix
# length or True); "evx": annotations may be incomplete (anyOf), "evc": contains annotates items
META = {"@", "evn", "evp", "eva", "evi", "evx", "evc"}


def _plain(b) -> bool:
    return set(b) - META == {"type"}


def _is_any(d) -> bool:
    return len(d) >= len(TYPES) and set(TYPES) <= {b.get("type") for b in d if _plain(b)}


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v, kw, p) -> int:
    if not _is_num(v) or v < 0 or float(v) != int(v):
        raise Refuse(kw, p, f"{kw} must be a non-negative integer")
    return int(v)


class Normalizer:
    def __init__(self, root, registry: referencing.Registry | None = None, deadline: float | None = None):
        self.root = root
        self.deadline = deadline
        self.draft = draft_of(root)
        try:
            resource = referencing.Resource.from_contents(root, default_specification=self.draft.spec)
            base = resource.id() or ""
            self.registry = (registry or referencing.Registry()).with_resource(base, resource).crawl()
        except Exception as e:
            raise Refuse("$id", "", f"the schema's identifiers are invalid: {e}") from e
        self.res = self.registry.resolver(base_uri=base)
        self.root_res = self.res
        # the draft's validator judges the user's schema objects; the 2020-12 one judges core forms
        self.validators = {}
        self.core_validator = jsonschema.Draft202012Validator(
            {}, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        self.memo: dict[int, list] = {}  # $ref target (by identity) -> branches
        self.active: set[int] = set()
        self.cyclic: set[int] = set()
        self.names: dict[int, str] = {}

    # ------------------------------------------------------------ entry points
    def run(self) -> dict:
        d = self.ref("#", "") if isinstance(self.root, dict) else self.norm(self.root, "")
        if not d:
            raise EmptySchemaError("the schema accepts no value: its constraints contradict each other")
        out = self.emit(d)
        if self.cyclic:
            defs, todo, done = {}, list(self.cyclic), set()
            while todo:
                p = todo.pop()
                if p not in done:
                    done.add(p)
                    defs[self.def_name(p)] = self.emit(self.memo[p])
                    todo.extend(self.cyclic - done)
            out = {**out, "$defs": defs} if "$ref" not in out else {"allOf": [out], "$defs": defs}
        return out

    def def_name(self, key: int) -> str:
        return self.names.setdefault(key, f"typedlm_{len(self.names)}")

    def valid(self, value, schema, p, core=False) -> bool:
        """Whether jsonschema accepts ``value`` under a schema object of the user's (its draft, the
        current base URI) or, with ``core``, under an emitted core-form schema (2020-12)."""
        try:
            if core:
                return self.core_validator.evolve(schema=schema).is_valid(value)
            v = self.validators.get(self.draft.name)
            if v is None:
                v = self.validators[self.draft.name] = self.draft.validator(
                    {}, registry=self.registry, format_checker=self.draft.validator.FORMAT_CHECKER)
            return v.evolve(schema=schema, _resolver=self.res).is_valid(value)
        except Exception as e:  # unresolvable $ref, bad regex, ...
            raise Refuse("$ref" if "ref" in type(e).__name__.lower() else "(schema)", p,
                         f"cannot evaluate the schema here: {type(e).__name__}") from e

    # ------------------------------------------------------------ schema -> branches
    def norm(self, s, p) -> list:
        if isinstance(s, dict) and p != "" and self.draft.spec.id_of(s) is not None:
            old = self.res
            try:
                self.res = self.res.in_subresource(self.draft.spec.create_resource(s))
                return self._norm(s, p)
            finally:
                self.res = old
        return self._norm(s, p)

    def _norm(self, s, p) -> list:
        self.check_time()
        if s is True:
            return _any()
        if s is False:
            return []
        if not isinstance(s, dict):
            raise Refuse("(schema)", p, f"a subschema must be an object or boolean, got {type(s).__name__}")
        raw, s = s, translate(s, self.draft)
        for kw in s:
            if kw not in HANDLED:
                raise Refuse(kw, ptr(p, s.written(kw)), f"'{kw}' is not enforced by the grammar")
        values = self.enum_values(s, p)
        if values is not None:
            kept = [v for v in values if self.valid(v, raw, p)]
            return [{"enum": kept}] if kept else []
        d = self.applicators(self.typed(s, p), s, p)
        if any(k in s for k in APPLICATORS):
            if "unevaluatedProperties" in s:
                d = self.unevaluated_properties(d, s["unevaluatedProperties"], ptr(p, "unevaluatedProperties"))
        if any(k in s for k in APPLICATORS + ("contains",)):  # b_array left it to here
            if "unevaluatedItems" in s:
                d = self.unevaluated_items(d, s["unevaluatedItems"], ptr(p, "unevaluatedItems"))
        return d

    def unevaluated_properties(self, d, sub, q) -> list:
        """Apply ``unevaluatedProperties`` after the in-place applicators: on each object branch, to the
        keys no properties/patternProperties/additionalProperties of the branch's parts evaluated."""
        u = self.norm(sub, q)
        out = []
        for b in d:
            if "$ref" in b or ("enum" in b and any(isinstance(v, dict) for v in b["enum"])):
                raise Refuse("unevaluatedProperties", q, "which keys were evaluated is unknown here "
                             "(a recursive $ref or an enum of objects)")
            if b.get("type") != "object" or b.get("eva"):
                out.append(b)
                continue
            if b.get("evx"):
                raise Refuse("unevaluatedProperties", q, "anyOf branches that overlap: which of them "
                             "evaluated a key depends on the instance")
            b = {**b, "properties": dict(b.get("properties", {})), "eva": True}
            for name in list(b["properties"]):
                if name not in b.get("evn", ()) and not any(re.search(pt, name) for pt in b.get("evp", ())):
                    b["properties"][name] = self.intersect(b["properties"][name], u, q, "unevaluatedProperties")
            b["additionalProperties"] = u
            b = self.complete_object(b)
            if b is not None:
                out.append(b)
        return out

    def unevaluated_items(self, d, sub, q) -> list:
        """Apply ``unevaluatedItems`` to the positions no prefixItems/items of the branch's parts evaluated."""
        u = self.norm(sub, q)
        out = []
        for b in d:
            if "$ref" in b or ("enum" in b and any(isinstance(v, list) for v in b["enum"])):
                raise Refuse("unevaluatedItems", q, "which items were evaluated is unknown here "
                             "(a recursive $ref or an enum of arrays)")
            if b.get("type") != "array" or b.get("evi") is True:
                out.append(b)
                continue
            if b.get("evx"):
                raise Refuse("unevaluatedItems", q, "overlapping anyOf branches: which items were evaluated "
                             "depends on the instance")
            n = b.get("evi", 0)
            pre = list(b.get("prefixItems", []))
            ub = u + b["evc"] if b.get("evc") and not _is_any(u) else u  # an item contains matched is evaluated
            for i in range(n, len(pre)):
                pre[i] = self.intersect(pre[i], ub, q, "unevaluatedItems")
            b = {**b, "evi": True, "items": self.meet_opt(b.get("items"), ub, q, "unevaluatedItems")}
            if pre:
                b["prefixItems"] = pre
            out.append(b)
        return out

    def enum_values(self, s, p):
        if "const" in s:
            return [s["const"]]
        if "enum" in s:
            if not isinstance(s["enum"], list):
                raise Refuse("enum", ptr(p, "enum"), "enum must be an array")
            return s["enum"]
        for part in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
            seen = 0
            part = translate(part, self.draft) if isinstance(part, dict) else part
            while isinstance(part, dict) and set(part) == {"$ref"} and seen < 16:
                part, seen = self.lookup(part["$ref"], ptr(p, "allOf")).contents, seen + 1
                part = translate(part, self.draft) if isinstance(part, dict) else part
            if isinstance(part, dict) and ("enum" in part or "const" in part):
                return self.enum_values(part, p)
        return None

    def lookup(self, ref, p, kw="$ref"):
        """Resolve ``ref`` (found at pointer ``p``) against the current base URI."""
        if not isinstance(ref, str):
            raise Refuse(kw, p, f"{kw} must be a string")
        try:
            return self.res.lookup(ref)
        except referencing.exceptions.Unresolvable as e:
            raise Refuse(kw, p,
                         f"reference {ref!r} does not resolve (remote references are never fetched)") from e

    def dynamic(self, kw, ref, p):
        """``$dynamicRef`` (2020-12) / ``$recursiveRef`` (2019-09) resolved statically where that is
        exact: the initial target has no dynamic anchor (a plain ``$ref``); or the root resource (with
        an id), the outermost of every dynamic scope, defines the anchor (it wins); or only one resource in the
        schema and the registry defines it (the initial target, whatever the scope). Else refused."""
        resolved = self.lookup(ref, p, kw)
        node = resolved.contents
        if kw == "$dynamicRef":
            name = ref.rpartition("#")[2] if "#" in ref else None
            anchored = bool(name) and "/" not in name and isinstance(node, dict) and node.get("$dynamicAnchor") == name
            hit = (lambda x: x.get("$dynamicAnchor") == name)
            at_root = "#" + (name or "")
        else:
            anchored = isinstance(node, dict) and node.get("$recursiveAnchor") is True
            hit = (lambda x: x.get("$recursiveAnchor") is True)
            at_root = "#"
        if not anchored:
            return resolved
        try:
            root = self.root_res.lookup(at_root)
        except referencing.exceptions.Unresolvable:
            root = None
        # measured: jsonschema leaves a root without an id out of the dynamic scope, so the root rule
        # needs one (else the count below decides)
        if root is not None and isinstance(root.contents, dict) and hit(root.contents) \
                and self.draft.spec.id_of(self.root) and _owner(self.root, root.contents, self.draft):
            return root
        docs = [self.root] + [self.registry[u].contents for u in self.registry if self.registry[u].contents
                              is not self.root]
        if sum(_count_nodes(doc, hit) for doc in docs) == 1:
            return resolved
        raise Refuse(kw, p, "the target depends on the dynamic scope (several resources define the anchor)")

    def ref(self, ref, p, resolved=None) -> list:
        resolved = resolved or self.lookup(ref, p)
        node, key = resolved.contents, id(resolved.contents)
        if key in self.memo:
            return self.memo[key]
        if key in self.active:
            self.cyclic.add(key)
            return [{"$ref": key}]
        self.active.add(key)
        self._keep = getattr(self, "_keep", []) + [node]
        old, self.res = self.res, resolved.resolver
        old_draft, self.draft = self.draft, draft_of(node, self.draft)  # a resource may name its own
        try:
            d = self.norm(node, p)
        finally:
            self.res, self.draft = old, old_draft
            self.active.discard(key)
        self.memo[key] = d
        return d

    def typed(self, s, p) -> list:
        t = s.get("type")
        if t is None:
            tl = list(TYPES)
        else:
            tl = t if isinstance(t, list) else [t]
            if not tl or any(not isinstance(x, str) or x not in JSON_TYPES for x in tl):
                raise Refuse("type", ptr(p, "type"), f"unknown type {t!r}")
            if "number" in tl:
                tl = [x for x in tl if x != "integer"]
        out = []
        for x in dict.fromkeys(tl):
            b = getattr(self, "b_" + x)(s, p) if x in ("number", "integer", "string", "array", "object") \
                else {"type": x}
            if b is not None:
                out.append(b)
        return out

    def b_integer(self, s, p):
        return self.b_number(s, p, "integer")

    def b_number(self, s, p, kind="number"):
        b = {"type": kind, "@": p}
        for kw, side, excl in (("minimum", "lo", False), ("exclusiveMinimum", "lo", True),
                               ("maximum", "hi", False), ("exclusiveMaximum", "hi", True)):
            if kw in s:
                if not _is_num(s[kw]):
                    raise Refuse(kw, _at(s, p, kw), f"{kw} must be a number")
                b = _bound(b, side, (s[kw], excl))
        if "multipleOf" in s:
            m = s["multipleOf"]
            if not _is_num(m) or m <= 0:
                raise Refuse("multipleOf", ptr(p, "multipleOf"), "multipleOf must be a positive number")
            if float(m) != int(m):
                raise Refuse("multipleOf", ptr(p, "multipleOf"), "a non-integer multipleOf is not enforced")
            b["type"] = "integer"
            if int(m) != 1:
                b["multipleOf"] = int(m)
        return _fix_int(b)

    def b_string(self, s, p):
        b = {"type": "string", "@": p}
        if "minLength" in s and _count(s["minLength"], "minLength", ptr(p, "minLength")) > 0:
            b["minLength"] = int(s["minLength"])
        if "maxLength" in s:
            b["maxLength"] = _count(s["maxLength"], "maxLength", ptr(p, "maxLength"))
        if "pattern" in s:
            rw = rewrite_pattern(s["pattern"])
            if rw is None:
                raise Refuse("pattern", ptr(p, "pattern"),
                             "pattern uses anchors, lookaround or escapes that cannot be enforced exactly")
            b["pattern"] = rw
        f = s.get("format")
        if "format" in s and not isinstance(f, str):
            raise Refuse("format", ptr(p, "format"), "format must be a string")
        if f is None or not known(f, self.draft):
            pass  # an unknown format is an annotation: the validator ignores it
        elif f in FORMAT_PATTERNS:
            if "pattern" in b:
                raise Refuse("format", ptr(p, "format"), "format beside pattern is not enforced by the grammar")
            b["pattern"] = FORMAT_PATTERNS[f]
        elif f in XGRAMMAR:
            b["format"] = f
        else:
            raise Refuse("format", ptr(p, "format"), f"format {f!r} {NOT_EXACT}")
        if f is not None and f in FORMAT_LENGTHS and ("pattern" in b or "format" in b):
            lo, hi = FORMAT_LENGTHS[f]
            if b.get("minLength", 0) <= lo:  # implied by the format: Pydantic's AnyUrl has minLength 1
                b.pop("minLength", None)
            if hi is not None and b.get("maxLength", math.inf) >= hi:
                b.pop("maxLength", None)
        return _check_string(b)

    def b_array(self, s, p):
        b = {"type": "array", "@": p}
        if "prefixItems" in s:
            if not isinstance(s["prefixItems"], list):
                raise Refuse("prefixItems", _at(s, p, "prefixItems"), "prefixItems must be an array")
            b["prefixItems"] = [self.norm(x, _at(s, p, "prefixItems", i)) for i, x in enumerate(s["prefixItems"])]
        b["evi"] = len(b.get("prefixItems", []))
        alone = not any(k in s for k in APPLICATORS)  # else unevaluated_items() applies it afterwards
        if "items" in s:
            b["items"], b["evi"] = self.norm(s["items"], _at(s, p, "items")), True
        elif "unevaluatedItems" in s and alone and "contains" not in s:
            b["items"], b["evi"] = self.norm(s["unevaluatedItems"], ptr(p, "unevaluatedItems")), True
        for kw in ("minItems", "maxItems"):
            if kw in s:
                b[kw] = _count(s[kw], kw, ptr(p, kw))
        if "contains" in s:
            mn = _count(s.get("minContains", 1), "minContains", ptr(p, "minContains"))
            mx = _count(s["maxContains"], "maxContains", ptr(p, "maxContains")) if "maxContains" in s else None
            c = self.norm(s["contains"], ptr(p, "contains"))
            b["evc"] = c  # the items it matches are evaluated (unevaluatedItems)
            if mn != 0 or mx is not None:
                b["contains"] = [(c, mn, mx)]
        if s.get("uniqueItems") is True and not (b.get("maxItems", 2) <= 1):
            if "contains" in b:
                raise Refuse("uniqueItems", ptr(p, "uniqueItems"), "uniqueItems beside contains is not enforced")
            return self.unique_items(b, p)
        return _check_array(b)

    def unique_items(self, b, p):
        """uniqueItems over a finite array space (every position an enum, boolean or null, and a
        bounded length): every array of distinct values, as an enum."""
        pre, items = b.get("prefixItems", []), b.get("items")
        hi = b.get("maxItems")
        if items == []:
            hi = len(pre) if hi is None else min(hi, len(pre))
        refuse = Refuse("uniqueItems", ptr(p, "uniqueItems"),
                        "uniqueItems is enforced only on arrays of at most one item or of a small finite space")
        if hi is None and items is not None and _finite(items) is not None:
            hi = len(pre) + len(_finite(items))  # distinct items from a finite set: no longer than that
        if hi is None:
            raise refuse
        pos = [_finite(pre[i] if i < len(pre) else items) for i in range(hi)]
        if any(v is None for v in pos) or math.prod(max(1, len(v)) for v in pos) > 4096:
            raise refuse
        arrays = []
        for k in range(b.get("minItems", 0), hi + 1):
            for combo in itertools.product(*pos[:k]):
                if all(not _same(x, y) for i, x in enumerate(combo) for y in combo[i + 1:]):
                    arrays.append(list(combo))
        if len(arrays) > MAX_ENUM:
            raise refuse
        return {"enum": arrays} if arrays else None

    def b_object(self, s, p):
        b = {"type": "object", "@": p, "properties": {}}
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise Refuse("properties", ptr(p, "properties"), "properties must be an object")
        for name, sub in props.items():
            b["properties"][name] = self.norm(sub, ptr(p, "properties", name))
        if "patternProperties" in s:
            pp = s["patternProperties"]
            if not isinstance(pp, dict):
                raise Refuse("patternProperties", ptr(p, "patternProperties"), "must be an object")
            b["patternProperties"] = {}
            if len(pp) > MAX_PATTERNS:
                raise Refuse("patternProperties", ptr(p, "patternProperties"),
                             f"more than {MAX_PATTERNS} patterns (each set of them is a class of keys)")
            for pat, sub in pp.items():
                if rewrite_pattern(pat) is None:
                    raise Refuse("patternProperties", ptr(p, "patternProperties", pat),
                                 "pattern cannot be enforced exactly")
                b["patternProperties"][pat] = self.norm(sub, ptr(p, "patternProperties", pat))
        b["evn"], b["evp"] = frozenset(b["properties"]), tuple(b.get("patternProperties", ()))
        if "additionalProperties" in s:
            b["additionalProperties"] = self.norm(s["additionalProperties"], ptr(p, "additionalProperties"))
            b["eva"] = True
        elif "unevaluatedProperties" in s and not any(k in s for k in APPLICATORS):
            b["additionalProperties"] = self.norm(s["unevaluatedProperties"], ptr(p, "unevaluatedProperties"))
            b["eva"] = True
        if "required" in s:
            r = s["required"]
            if not isinstance(r, list) or not all(isinstance(x, str) for x in r):
                raise Refuse("required", ptr(p, "required"), "required must be an array of strings")
            b["required"] = list(dict.fromkeys(r))
        for kw in ("minProperties", "maxProperties"):
            if kw in s:
                b[kw] = _count(s[kw], kw, ptr(p, kw))
        if "propertyNames" in s:
            pn = self.norm(s["propertyNames"], ptr(p, "propertyNames"))
            names = [x for x in pn if x.get("type") == "string" or "enum" in x]
            if not names:
                b["maxProperties"] = 0
            elif not (len(names) == 1 and _plain(names[0])):
                b["propertyNames"] = names
                for name in b["properties"]:
                    if not self.valid(name, s["propertyNames"], ptr(p, "propertyNames")):
                        b["properties"][name] = []
        return self.complete_object(b)

    def complete_object(self, b):
        """List every required name in properties; drop the branch when a required key is impossible."""
        for r in b.get("required", []):
            if r not in b["properties"]:
                b["properties"][r] = self.prop_schema(b, r)
            if b["properties"][r] == []:
                return None
        if b.get("minProperties", 0) > b.get("maxProperties", math.inf):
            return None
        if not b.get("properties"):
            b.pop("properties", None)
        return b

    def prop_schema(self, b, name):
        """What a value under key ``name`` must match in object branch ``b``."""
        parts = [d for pat, d in b.get("patternProperties", {}).items() if re.search(pat, name)]
        if name in b.get("properties", {}):
            parts.insert(0, b["properties"][name])
        if not parts:
            add = b.get("additionalProperties")
            return _any() if add is None else add
        out = parts[0]
        for d in parts[1:]:
            out = self.intersect(out, d, b.get("@", ""), "patternProperties")
        return out

    # ------------------------------------------------------------ applicators
    def applicators(self, d, s, p) -> list:
        if "$ref" in s:
            d = self.intersect(d, self.ref(s["$ref"], ptr(p, "$ref")), p, "$ref")
        for kw in ("$dynamicRef", "$recursiveRef"):
            if kw in s:
                target = self.dynamic(kw, s[kw], ptr(p, kw))
                d = self.intersect(d, self.ref(s[kw], ptr(p, kw), target), p, kw)
        for kw in ("allOf", "anyOf", "oneOf"):
            if kw in s and (not isinstance(s[kw], list) or not s[kw]):
                raise Refuse(kw, ptr(p, kw), "must be a non-empty array of schemas")
        for i, sub in enumerate(s.get("allOf", [])):
            d = self.intersect(d, self.norm(sub, ptr(p, "allOf", i)), ptr(p, "allOf"), "allOf")
        if "anyOf" in s:
            ds = [self.norm(sub, ptr(p, "anyOf", i)) for i, sub in enumerate(s["anyOf"])]
            u = [b for x in ds for b in x]
            if len(ds) > 1 and not self.disjoint(ds, ptr(p, "anyOf")):
                u = [{**b, "evx": True} if b.get("type") in ("object", "array") else b for b in u]
            d = self.intersect(d, u, ptr(p, "anyOf"), "anyOf")
        if "oneOf" in s:
            d = self.intersect(d, self.one_of(s["oneOf"], ptr(p, "oneOf")), ptr(p, "oneOf"), "oneOf")
        if "not" in s:
            q = ptr(p, "not")
            d = self.intersect(d, self.complement(self.norm(s["not"], q), q, "not"), q, "not")
        if "if" in s:
            q = ptr(p, "if")
            cond = self.norm(s["if"], q)
            then = self.norm(s.get("then", True), ptr(p, "then"))
            other = self.norm(s.get("else", True), ptr(p, "else"))
            alt = self.intersect(cond, then, q, "if") + \
                self.intersect(self.complement(cond, q, "if"), other, q, "if")
            d = self.intersect(d, alt, q, "if")
        for kw in ("dependentRequired", "dependentSchemas"):
            deps = s.get(kw, {})
            if not isinstance(deps, dict):
                raise Refuse(kw, _at(s, p, kw), f"{kw} must be an object")
            for key, dep in deps.items():
                q = _at(s, p, kw, key)
                if kw == "dependentRequired":
                    dep = {"required": dep}
                need = self.intersect([{"type": "object", "@": q, "properties": {key: _any()}, "required": [key]}],
                                      self.norm(dep, q), q, kw)
                absent = [{"type": "object", "@": q, "properties": {key: []}}]
                others = [{"type": t} for t in TYPES if t != "object"]
                d = self.intersect(d, others + absent + need, q, kw)
        return d

    def disjoint(self, ds, p) -> bool:
        """Whether no instance matches two of the alternatives (as far as intersection can tell)."""
        try:
            return all(not self.intersect(a, b, p, "oneOf") for i, a in enumerate(ds) for b in ds[i + 1:])
        except Refuse:
            return False

    def one_of(self, subs, p) -> list:
        ds = [self.norm(sub, ptr(p, i)) for i, sub in enumerate(subs)]
        if self.disjoint(ds, p):
            return [b for d in ds for b in d]
        out = []
        for i, a in enumerate(ds):
            part = a
            for j, b in enumerate(ds):
                if i != j:
                    part = self.intersect(part, self.complement(b, p, "oneOf"), p, "oneOf")
            out.extend(part)
        return out

    # ------------------------------------------------------------ intersection
    def check_time(self):
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise GrammarCompileError("rewriting the schema ran past the compile time limit")

    def intersect(self, x, y, p, kw) -> list:
        self.check_time()
        if _is_any(x):
            return y
        if _is_any(y):
            return x
        out = []
        for a in x:
            for b in y:
                out.extend(self.meet(a, b, p, kw))
        if len(out) > MAX_BRANCHES:
            raise Refuse(kw, p, f"the exact rewrite needs more than {MAX_BRANCHES} alternatives")
        return out

    def expand(self, b, p, kw):
        target = b["$ref"]
        if target in self.active:
            raise Refuse(kw, p, "a recursive $ref inside an intersection or negation")
        return self.memo[target]

    def meet(self, a, b, p, kw) -> list:
        if "$ref" in a:
            return self.intersect(self.expand(a, p, kw), [b], p, kw)
        if "$ref" in b:
            return self.intersect([a], self.expand(b, p, kw), p, kw)
        if "enum" in a or "enum" in b:
            e, other = (a, b) if "enum" in a else (b, a)
            if "enum" in other:
                kept = [v for v in e["enum"] if any(_same(v, w) for w in other["enum"])]
            else:
                probe = _whole_match(self.emit_standalone([other]))
                kept = [v for v in e["enum"] if self.valid(v, probe, p, core=True)]
            return [{"enum": kept}] if kept else []
        ta, tb = a["type"], b["type"]
        if ta != tb and {ta, tb} != {"number", "integer"}:
            return []
        t = "integer" if "integer" in (ta, tb) else ta
        m = getattr(self, "m_" + t, None)
        out = {**a, **b, "type": t, "@": a.get("@", b.get("@", p))} if m is None else m(a, b, p, kw)
        if out is not None and t in ("object", "array"):
            out.update(_merge_meta(a, b))
        return [out] if out is not None else []

    def m_number(self, a, b, p, kw, kind="number"):
        out = {"type": kind, "@": a.get("@", p)}
        for side in ("lo", "hi"):
            for x in (a, b):
                if side in x:
                    out = _bound(out, side, x[side])
        ms = [x["multipleOf"] for x in (a, b) if "multipleOf" in x]
        if ms:
            out["multipleOf"] = math.lcm(*ms)
        if a.get("frac") or b.get("frac"):
            if kind == "integer" or ms:  # non-integral numbers meet integers: nothing
                return None
            out["frac"] = True
        ns = tuple(dict.fromkeys(a.get("notMultipleOf", ()) + b.get("notMultipleOf", ())))
        if ns:
            out["notMultipleOf"] = ns
        return _fix_int(out)

    def m_integer(self, a, b, p, kw):
        return self.m_number(a, b, p, kw, "integer")

    def m_string(self, a, b, p, kw):
        out = {"type": "string", "@": a.get("@", p)}
        for x in (a, b):
            if "minLength" in x:
                out["minLength"] = max(out.get("minLength", 0), x["minLength"])
            if "maxLength" in x:
                out["maxLength"] = min(out.get("maxLength", math.inf), x["maxLength"])
            for k in ("pattern", "format"):
                if k in x:
                    if k in out and out[k] != x[k]:
                        raise Refuse(k, x.get("@", p), f"two different {k}s on one string cannot be intersected")
                    out[k] = x[k]
        return _check_string(out)

    def m_array(self, a, b, p, kw):
        out = {"type": "array", "@": a.get("@", p)}
        pa, pb = a.get("prefixItems", []), b.get("prefixItems", [])
        n = max(len(pa), len(pb))
        if n:
            out["prefixItems"] = [self.meet_opt(pa[i] if i < len(pa) else a.get("items"),
                                                pb[i] if i < len(pb) else b.get("items"), p, kw) for i in range(n)]
        items = self.meet_opt(a.get("items"), b.get("items"), p, kw)
        if items is not None:
            out["items"] = items
        for k, f in (("minItems", max), ("maxItems", min)):
            vals = [x[k] for x in (a, b) if k in x]
            if vals:
                out[k] = f(vals)
        cs = a.get("contains", []) + b.get("contains", [])
        if len(cs) > MAX_CONTAINS:
            raise Refuse("contains", a.get("@", p), f"more than {MAX_CONTAINS} contains on one array")
        if cs:
            out["contains"] = cs
        return _check_array(out)

    def meet_opt(self, x, y, p, kw):
        if x is None:
            return y
        if y is None:
            return x
        return self.intersect(x, y, p, kw)

    def m_object(self, a, b, p, kw):
        if a.get("patternProperties") and b.get("patternProperties"):
            raise Refuse("patternProperties", a.get("@", p), "two patternProperties cannot be intersected")
        out = {"type": "object", "@": a.get("@", p), "properties": {}}
        for name in list(a.get("properties", {})) + list(b.get("properties", {})):
            if name not in out["properties"]:
                out["properties"][name] = self.intersect(self.prop_schema(a, name), self.prop_schema(b, name), p, kw)
        for x, y in ((a, b), (b, a)):
            if x.get("patternProperties"):
                out["patternProperties"] = {pat: self.meet_opt(d, y.get("additionalProperties"), p, kw)
                                            for pat, d in x["patternProperties"].items()}
        add = self.meet_opt(a.get("additionalProperties"), b.get("additionalProperties"), p, kw)
        if add is not None:
            out["additionalProperties"] = add
        pn = self.meet_opt(a.get("propertyNames"), b.get("propertyNames"), p, kw)
        if pn is not None:
            if not pn:
                out["maxProperties"] = 0
            else:
                out["propertyNames"] = pn
        req = list(dict.fromkeys(a.get("required", []) + b.get("required", [])))
        if req:
            out["required"] = req
        for k, f in (("minProperties", max), ("maxProperties", min)):
            vals = [x[k] for x in (a, b) if k in x]
            if vals:
                out[k] = f(vals)
        return self.complete_object(out)

    # ------------------------------------------------------------ complement
    def complement(self, d, p, kw) -> list:
        out = _any()
        for b in d:
            if "$ref" in b:
                c = self.complement(self.expand(b, p, kw), p, kw)
            else:
                c = self.complement_branch(b, p, kw)
            out = self.intersect(out, c, p, kw)
        return out

    def complement_branch(self, b, p, kw) -> list:
        if "enum" in b:
            out = []
            for t in TYPES:
                vals = [v for v in b["enum"] if _type_of(v) == t]
                if not vals:
                    out.append({"type": t})
                elif t == "boolean":
                    rest = [v for v in (True, False) if not any(_same(v, w) for w in vals)]
                    out += [{"enum": rest}] if rest else []
                elif t == "string" and all(_regex_safe(v) for v in vals):
                    out.append({"type": "string", "@": p, "pattern": _not_strings(vals)})
                elif t == "number":  # the open intervals between the values
                    cuts = sorted(set(Fraction(v) for v in vals))
                    out.append({"type": "number", "@": p, "hi": (_num(cuts[0]), True)})
                    out += [{"type": "number", "@": p, "lo": (_num(x), True), "hi": (_num(y), True)}
                            for x, y in zip(cuts, cuts[1:])]
                    out.append({"type": "number", "@": p, "lo": (_num(cuts[-1]), True)})
                elif t != "null":
                    raise Refuse(kw, p, f"the complement of an enum of {t}s cannot be enforced")
            return out
        t = b["type"]
        if t == "integer":  # a non-integral number, another type, a number outside the bounds or the residues
            q = b.get("@", p)
            out = [{"type": u} for u in TYPES if u != "number"] + [{"type": "number", "@": q, "frac": True}]
            for k in set(b) & {"lo", "hi"}:
                out += self.complement_keyword("number", k, b, p, kw)
            if "multipleOf" in b:
                out.append({"type": "integer", "@": q, "notMultipleOf": (b["multipleOf"],)})
            out += [{"type": "integer", "@": q, "multipleOf": n} for n in b.get("notMultipleOf", ())]
            return out
        out = [{"type": u} for u in TYPES if u != t]
        keys = set(b) - {"type"} - META
        if t == "object":
            if not b.get("properties") and not b.get("required"):
                keys -= {"properties"}
            if all(_is_any(d) for d in b.get("patternProperties", {}).values()):
                keys -= {"patternProperties"}  # constrains nothing
            if "additionalProperties" in b and _is_any(b["additionalProperties"]):
                keys -= {"additionalProperties"}
        for k in keys:
            out += self.complement_keyword(t, k, b, p, kw)
        return out

    def complement_keyword(self, t, k, b, p, kw) -> list:
        q = b.get("@", p)
        if t == "number" and k == "frac":
            return [{"type": "integer", "@": q}]
        if t == "number" and k in ("lo", "hi"):
            v, excl = b[k]
            return [{"type": "number", "@": q, "hi" if k == "lo" else "lo": (v, not excl)}]
        pairs = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems"),
                 "object": ("minProperties", "maxProperties")}
        if t in pairs and k in pairs[t]:
            lo, hi = pairs[t]
            if k == lo:
                return [{"type": t, "@": q, hi: b[k] - 1}] if b[k] > 0 else []
            return [{"type": t, "@": q, lo: b[k] + 1}]
        if t == "array" and k == "prefixItems":  # some position i holds an item that fails prefixItems[i]
            out = []
            for i, d in enumerate(b["prefixItems"]):
                neg = self.complement(d, p, kw)
                if neg:
                    out.append({"type": "array", "@": q, "prefixItems": [_any() for _ in range(i)] + [neg],
                                "minItems": i + 1})
            return out
        if t == "array" and k == "contains":  # fewer than minContains matches, or more than maxContains
            out = []
            for c, mn, mx in b["contains"]:
                out += [{"type": "array", "@": q, "contains": [(c, 0, mn - 1)]}] if mn > 0 else []
                out += [{"type": "array", "@": q, "contains": [(c, mx + 1, None)]}] if mx is not None else []
            return out
        if t == "object" and k == "required":
            return [{"type": "object", "@": q, "properties": {r: []}} for r in b["required"]]
        if t == "object" and k == "properties":
            out = []
            for name, d in b["properties"].items():
                if name in b.get("required", []):  # covered by required's complement: present and ¬S
                    neg = self.complement(d, p, kw)
                    out += [{"type": "object", "@": q, "properties": {name: neg}, "required": [name]}] if neg else []
                elif d != _any():
                    neg = self.complement(d, p, kw)
                    out += [{"type": "object", "@": q, "properties": {name: neg}, "required": [name]}] if neg else []
            return out
        raise Refuse(kw, p, f"the complement of '{_kw_name(k)}' on {t}s cannot be enforced")

    # ------------------------------------------------------------ emission
    def emit(self, d) -> dict:
        if not d:
            return dict(NOTHING)
        plain = [b["type"] for b in d if _plain(b)]
        if set(TYPES) <= set(plain):
            return {}
        branches = []
        if plain:
            branches.append({"type": plain[0] if len(plain) == 1 else list(dict.fromkeys(plain))})
        for b in d:
            if not _plain(b):
                e = self.emit_branch(b)
                if e is not None:
                    branches.append(e)
        if not branches:
            return dict(NOTHING)
        return branches[0] if len(branches) == 1 else {"anyOf": branches}

    def emit_standalone(self, d) -> dict:
        out = self.emit(d)
        if self.cyclic:
            out = {"allOf": [out], "$defs": {self.def_name(c): self.emit(self.memo[c]) for c in self.cyclic
                                             if c in self.memo}}
        return out

    def bounded_multiples(self, b):
        """Integer ``multipleOf`` between bounds (measured: xgrammar accepts -4 for multipleOf 3,
        minimum -10): the enum of the multiples, when both bounds are given and there are few."""
        m = b["multipleOf"]
        if "lo" not in b or "hi" not in b:
            raise Refuse("multipleOf", b.get("@", ""), "multipleOf beside only one bound is not enforced")
        first, last = -(-b["lo"][0] // m) * m, b["hi"][0] // m * m  # bounds are whole and inclusive here
        if (last - first) // m + 1 > MAX_ENUM:
            raise Refuse("multipleOf", b.get("@", ""),
                         f"multipleOf between bounds is enforced as an enum of at most {MAX_ENUM} values")
        values = list(range(first, last + 1, m))
        return {"enum": values} if values else dict(NOTHING)

    def emit_contains(self, b, out, pre) -> bool:
        """Add ``contains`` (and for the grammar, the item classes, see :mod:`.ebnf`) to emitted array
        ``out`` whose prefix is ``pre``; False when no array satisfies it."""
        cs, q = b["contains"], b.get("@", "")
        negs = [self.complement(c, q, "contains") for c, _, _ in cs]

        def classes(base):  # mask of the contains an item matches -> the schema of such items
            out = []
            for mask in range(2 ** len(cs)):
                d = base
                for j, (c, _, _) in enumerate(cs):
                    d = self.intersect(d, c if mask >> j & 1 else negs[j], q, "contains")
                if d:
                    out.append([mask, self.emit(d)])
            return out

        prefix = [classes(x) for x in pre]
        tail = classes(b["items"]) if "items" in b else classes(_any())
        bounds = [[mn, mx] for _, mn, mx in cs]
        try:
            auto = contains_automaton(bounds, out.get("minItems", 0), out.get("maxItems"),
                                      [{m for m, _ in x} for x in prefix], {m for m, _ in tail})
        except ValueError as e:
            raise Refuse("contains", q, str(e)) from None
        if auto is None:
            return False
        emitted = [{"contains": self.emit(c), **({"minContains": mn} if mn != 1 else {}),
                    **({"maxContains": mx} if mx is not None else {})} for c, mn, mx in cs]
        if len(emitted) == 1:
            out.update(emitted[0])
        else:
            out["allOf"] = emitted
        out["x-typedlm-contains"] = {"bounds": bounds, "prefix": prefix, "tail": tail}
        return True

    def key_fsm(self, d, q):
        """The automaton of the strings that branches ``d`` (a propertyNames schema) accept; None: none."""
        out = None
        for x in d:
            if "enum" in x:
                vals = [v for v in x["enum"] if isinstance(v, str)]
                f = key_names(vals) if vals else None
            elif x.get("type") == "string":
                if "format" in x:
                    raise Refuse("propertyNames", q, f"format {x['format']!r} on property names is not enforced")
                f = key_lengths(x.get("minLength", 0), x.get("maxLength"))
                if "pattern" in x:
                    f = f & key_pattern(x["pattern"])
            else:
                continue
            if f is not None:
                out = f if out is None else out | f
        return out

    def key_classes(self, b) -> dict | None:
        """For the grammar (:mod:`.ebnf`): each listed name with the schema its value must match, and each
        class of other keys (the set of patterns a key matches) as an automaton with its value schema."""
        q = b.get("@", "")
        if "minProperties" in b or "maxProperties" in b:
            raise Refuse("minProperties" if "minProperties" in b else "maxProperties", q,
                         "property counts beside patternProperties/propertyNames are not enforced")
        props, pats = b.get("properties", {}), list(b.get("patternProperties", {}).items())
        try:
            allowed = self.key_fsm(b["propertyNames"], q) if "propertyNames" in b else any_key()
            listed = []
            for name in props:
                d = self.prop_schema(b, name) if allowed is not None and allowed.accepts(name) else []
                if not d and name in b.get("required", []):
                    return None
                listed.append([name, self.emit(d) if d else False, name in b.get("required", [])])
            others = []
            if allowed is not None:
                if props:
                    allowed = allowed & key_names(list(props)).everythingbut()
                fsms = [key_pattern(rewrite_pattern(pat)) for pat, _ in pats]
                for mask in range(2 ** len(pats)):
                    f, value = allowed, b.get("additionalProperties", _any()) if mask == 0 else _any()
                    for i, g in enumerate(fsms):
                        if mask >> i & 1:
                            f = f & g
                            value = self.intersect(value, pats[i][1], q, "patternProperties")
                        else:
                            f = f & g.everythingbut()
                    spec = key_spec(f) if value else None
                    if spec is not None:
                        others.append([spec, self.emit(value)])
        except TooLarge as e:
            raise Refuse("patternProperties" if pats else "propertyNames", q, str(e)) from None
        return {"listed": listed, "others": others}

    def emit_branch(self, b):
        if "$ref" in b:
            return {"$ref": "#/$defs/" + self.def_name(b["$ref"])}
        if "enum" in b:
            return {"enum": b["enum"]}
        t, out = b["type"], {"type": b["type"]}
        if t in ("number", "integer"):
            if b.get("frac"):
                if "lo" in b or "hi" in b:
                    raise Refuse("type", b.get("@", ""), "non-integral numbers between bounds are not enforced")
                return {"type": "number", "not": {"type": "integer"}, "x-typedlm-fraction": True}
            if "notMultipleOf" in b:  # residues modulo the lcm: a grammar of its own (.ebnf)
                m, ns = b.get("multipleOf", 1), b["notMultipleOf"]
                modulus = math.lcm(m, *ns)
                if "lo" in b or "hi" in b or modulus > MAX_MODULUS:
                    raise Refuse("multipleOf", b.get("@", ""), "a multipleOf complement between bounds or "
                                 f"modulo more than {MAX_MODULUS} is not enforced")
                residues = [r for r in range(modulus) if r % m == 0 and all(r % n for n in ns)]
                if not residues:
                    return None
                return {"type": "integer", **({"multipleOf": m} if m != 1 else {}),
                        "not": {"anyOf": [{"multipleOf": n} for n in ns]}, "x-typedlm-residues": [modulus, residues]}
            if "multipleOf" in b and ("lo" in b or "hi" in b):
                return self.bounded_multiples(b)
            for side, (inc, exc) in (("lo", ("minimum", "exclusiveMinimum")), ("hi", ("maximum", "exclusiveMaximum"))):
                if side in b:
                    v, excl = b[side]
                    out[exc if excl else inc] = v
            if "multipleOf" in b:
                out["multipleOf"] = b["multipleOf"]
        elif t == "string":
            out.update({k: b[k] for k in ("minLength", "maxLength", "pattern", "format") if k in b})
        elif t == "array":
            pre = list(b.get("prefixItems", []))
            mx = b.get("maxItems")
            for i, x in enumerate(pre):
                if not x:
                    pre, mx = pre[:i], i if mx is None else min(mx, i)
                    break
            if pre:
                out["prefixItems"] = [self.emit(x) for x in pre]
            if "items" in b and b["items"] != _any():
                out["items"] = False if not b["items"] else self.emit(b["items"])
            if b.get("minItems"):
                out["minItems"] = b["minItems"]
            if mx is not None:
                out["maxItems"] = mx
            if out.get("minItems", 0) > out.get("maxItems", math.inf):
                return None
            if "contains" in b and not self.emit_contains(b, out, pre):
                return None
        elif t == "object":
            props = b.get("properties", {})
            pats = b.get("patternProperties", {})
            # measured: xgrammar lets any extra key through beside properties and patternProperties; it
            # mishandles names that need JSON escapes; one pattern alone it enforces
            if len(pats) > 1 or (props and pats) or "propertyNames" in b or any(map(_needs_escape, props)):
                classes = self.key_classes(b)
                if classes is None:
                    return None
                out["x-typedlm-object"] = classes
            if "propertyNames" in b:
                out["propertyNames"] = self.emit(b["propertyNames"])
            if props:
                out["properties"] = {n: self.emit(d) for n, d in props.items()}
            if pats:
                out["patternProperties"] = {rewrite_pattern(pat): self.emit(d) for pat, d in pats.items()}
            req = b.get("required", [])
            if req:
                out["required"] = req
            add = b.get("additionalProperties")
            if add is not None and add != _any():
                out["additionalProperties"] = False if not add else self.emit(add)
            for k in ("minProperties", "maxProperties"):
                if k in b and (k == "maxProperties" or b[k] > 0):
                    out[k] = b[k]
        return out


# ---------------------------------------------------------------- helpers

def _whole_match(core):
    """A core-form schema for jsonschema: its patterns match whole strings (as in xgrammar), where
    jsonschema searches. Without this a probe's ``(...){0,1}`` matched every string."""
    if isinstance(core, list):
        return [_whole_match(x) for x in core]
    if not isinstance(core, dict):
        return core
    out = {}
    for k, v in core.items():
        if k == "pattern":
            out[k] = f"^(?:{v})\\Z"
        elif k == "patternProperties":
            out[k] = {f"^(?:{pat})\\Z": _whole_match(x) for pat, x in v.items()}
        elif k in ("properties", "$defs", "x-typedlm-contains"):
            out[k] = {name: _whole_match(x) for name, x in v.items()}
        elif k in ("anyOf", "allOf", "prefixItems", "items", "additionalProperties", "contains", "propertyNames"):
            out[k] = _whole_match(v)
        else:
            out[k] = v
    return out


def _count_nodes(doc, hit) -> int:
    """How many schema objects in ``doc`` (any depth) satisfy ``hit``."""
    if isinstance(doc, dict):
        return int(hit(doc)) + sum(_count_nodes(v, hit) for v in doc.values())
    if isinstance(doc, list):
        return sum(_count_nodes(v, hit) for v in doc)
    return 0


def _owner(root, node, draft) -> bool:
    """Whether ``node`` belongs to the root resource (no subresource with its own id on the way)."""
    def walk(x, inside_root):
        if x is node:
            return inside_root
        if isinstance(x, dict):
            here = inside_root and (x is root or draft.spec.id_of(x) is None)
            return any(walk(v, here) for v in x.values())
        if isinstance(x, list):
            return any(walk(v, inside_root) for v in x)
        return False

    return walk(root, True)


def _at(s, p, kw, *rest) -> str:
    """The pointer of keyword ``kw`` of translated schema object ``s`` as the user wrote it."""
    return ptr(p, s.written(kw) if hasattr(s, "written") else kw, *rest)


def _regex_safe(text: str) -> bool:
    """Characters a JSON string holds unescaped and a regex can name as \\uXXXX."""
    return all(0x20 <= ord(c) <= 0xFFFF and c not in '"\\' for c in text)


def _not_strings(values) -> str:
    """A whole-match regex for every string except ``values`` (a trie: at each node the string may
    end (unless a value ends there), leave the trie with another character, or follow an edge)."""
    def esc(c):
        return f"\\u{ord(c):04x}"

    def node(suffixes):
        firsts = sorted({x[0] for x in suffixes if x})
        leave = ("[^" + "".join(map(esc, firsts)) + "]" if firsts else r"[\s\S]") + r"[\s\S]*"
        alts = [leave] + [esc(c) + node([x[1:] for x in suffixes if x and x[0] == c]) for c in firsts]
        body = "(" + "|".join(alts) + ")"
        return body if "" in suffixes else body + "{0,1}"  # "{0,1}", not "?": see refusal._scan

    return node(list(dict.fromkeys(values)))


def _merge_meta(a, b) -> dict:
    """Evaluated keys/items of a conjunction: everything either part evaluated."""
    out = {}
    if a.get("type") == "object" or b.get("type") == "object":
        out["evn"] = frozenset(a.get("evn", ())) | frozenset(b.get("evn", ()))
        out["evp"] = tuple(dict.fromkeys(a.get("evp", ()) + b.get("evp", ())))
        if a.get("eva") or b.get("eva"):
            out["eva"] = True
    else:
        ia, ib = a.get("evi", 0), b.get("evi", 0)
        out["evi"] = True if ia is True or ib is True else max(ia, ib)
        if a.get("evc") or b.get("evc"):
            out["evc"] = a.get("evc", []) + b.get("evc", [])
    if a.get("evx") or b.get("evx"):
        out["evx"] = True
    return out


def _needs_escape(name: str) -> bool:
    return any(ch in '"\\' or ord(ch) < 0x20 for ch in name)


def _num(f: Fraction):
    """A Fraction made of a JSON number back into that number (int when whole)."""
    return int(f) if f.denominator == 1 else float(f)


def _kw_name(k):
    return {"lo": "minimum", "hi": "maximum"}.get(k, k)


def _same(a, b) -> bool:
    """JSON Schema equality: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) in (int, float) and type(b) in (int, float) and a == b or type(a) is type(b) and a == b


def _finite(d):
    """The values of a finite branch list (enums, booleans, null), or None when it is infinite."""
    if d is None:
        return None
    out = []
    for b in d:
        if "enum" in b:
            out += b["enum"]
        elif b.get("type") == "boolean" and _plain(b):
            out += [True, False]
        elif b.get("type") == "null" and _plain(b):
            out.append(None)
        else:
            return None
    return out


def _bound(b, side, new):
    """Tighten the lower ('lo') or upper ('hi') bound ``(value, exclusive)`` of a numeric branch."""
    if side not in b:
        return {**b, side: new}
    (v0, e0), (v1, e1) = b[side], new
    if v0 == v1:
        keep = (v0, e0 or e1)
    elif side == "lo":
        keep = new if Fraction(v1) > Fraction(v0) else b[side]
    else:
        keep = new if Fraction(v1) < Fraction(v0) else b[side]
    return {**b, side: keep}


def _fix_int(b):
    """Integer bounds become whole and inclusive (xgrammar needs whole numbers); empty ranges -> None."""
    if b["type"] == "integer":
        if "lo" in b:
            v, excl = b["lo"]
            b["lo"] = (math.floor(v) + 1 if excl else math.ceil(v), False)
        if "hi" in b:
            v, excl = b["hi"]
            b["hi"] = (math.ceil(v) - 1 if excl else math.floor(v), False)
    if "lo" in b and "hi" in b:
        (lo, le), (hi, he) = b["lo"], b["hi"]
        if Fraction(lo) > Fraction(hi) or (lo == hi and (le or he)):
            return None
    return b


def _check_string(b):
    if ("pattern" in b or "format" in b) and ("minLength" in b or "maxLength" in b):
        kw = "minLength" if "minLength" in b else "maxLength"
        raise Refuse(kw, b.get("@", ""), f"{kw} beside pattern/format is not enforced by the grammar")
    if "pattern" in b and "format" in b:
        raise Refuse("format", b.get("@", ""), "format beside pattern is not enforced by the grammar")
    if b.get("minLength", 0) > b.get("maxLength", math.inf):
        return None
    return b


def _check_array(b):
    if b.get("minItems", 0) > b.get("maxItems", math.inf):
        return None
    return b


def find_refusals(schema, registry: referencing.Registry | None = None) -> list[Refusal]:
    """The keyword (with its pointer) that stops ``schema`` from being enforced exactly; [] when none."""
    try:
        Normalizer(schema, registry).run()
    except Refuse as r:
        return [r.refusal]
    except RecursionError:
        return [Refusal("$ref", "", "the schema nests too deeply")]
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
        return [Refusal("(schema)", "", f"{INTERNAL}: {type(e).__name__}: {e}")]
    return []


def prepare_schema(schema: dict, *, lenient: bool = False, registry: referencing.Registry | None = None,
                   deadline: float | None = None) -> dict:
    """The core-form schema to compile (exact), or GrammarCompileError naming keyword and pointer.
    ``lenient``: compile the schema as given even where it would not be enforced.
    ``registry``: documents that remote ``$ref`` s may point to (nothing is ever fetched).
    ``deadline``: ``time.monotonic()`` value past which the rewrite gives up (GrammarCompileError)."""
    try:
        return Normalizer(copy.deepcopy(schema), registry, deadline).run()
    except Refuse as r:
        if lenient:
            return schema
        raise GrammarCompileError(r.refusal.message(), keyword=r.refusal.keyword,
                                  pointer=r.refusal.pointer or "/") from None
    except RecursionError:
        raise GrammarCompileError("the schema nests too deeply", keyword="$ref", pointer="/") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:  # a bug here: never a crash
        raise GrammarCompileError(f"{INTERNAL}: {type(e).__name__}: {e}") from e
