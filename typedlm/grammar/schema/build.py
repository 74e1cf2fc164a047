"""Building: a schema object (draft-translated) -> branches; references, applicators, unevaluated*.

One part of a :class:`.rewrites.Normalizer` run (``n``: the resolver, memo of ``$ref`` targets, draft);
it meets and complements through ``n.algebra``.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import referencing.exceptions

from .algebra import check_array
from .branches import Array, Enum, Object, Ref, String, any_, at, count, is_plain, plain
from .drafts import DEFAULT, draft_of, translate
from .refusal import JSON_TYPES, TYPES, Refuse, key_regex, pattern_problem, ptr
from .refs import dynamic_target
from .scalars import number_branch, string_branch, unique_items
from .unevaluated import unevaluated_items, unevaluated_properties
from .one_of import disjoint, one_of
from .weaken import UNEVALUATED, exactly, weakened

MAX_PATTERNS = 4  # patternProperties: 2**n classes of keys
APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "$ref", "$dynamicRef", "$recursiveRef", "dependentSchemas")
# validating keywords (2020-12 form, see drafts.translate) the normalizer handles; any other
# validating keyword is refused by name, and annotations never reach it
HANDLED = DEFAULT.validating | {"$recursiveRef"}


class Builder:
    """Schema objects to branches."""

    def __init__(self, n):
        self.n = n  # the run (:class:`.rewrites.Normalizer`): its state and its other parts, named explicitly
        self.negative = 0  # > 0 while building a subschema used negatively (:func:`.weaken.exactly`)
        self.relaxed_forms: dict = {}  # relaxing run: id(schema object) -> (what it became, the drops)

    def norm(self, s, p) -> list:
        """The branches of schema ``s`` (at pointer ``p``); in a relaxing run, where used positively,
        a superset where a keyword is refused (:mod:`.weaken`)."""
        if not (self.n.relax and self.negative == 0 and isinstance(s, dict)):
            return self.norm_object(s, p)
        return weakened(self, s, p)

    def norm_object(self, s, p) -> list:
        if isinstance(s, dict) and p != "" and self.n.draft.spec.id_of(s) is not None:
            old = self.n.res
            try:
                self.n.res = self.n.res.in_subresource(self.n.draft.spec.create_resource(s))
                return self._norm(s, p)
            finally:
                self.n.res = old
        return self._norm(s, p)

    def _norm(self, s, p) -> list:
        self.n.check_time()
        if s is True:
            return any_()
        if s is False:
            return []
        if not isinstance(s, dict):
            raise Refuse("(schema)", p, f"a subschema must be an object or boolean, got {type(s).__name__}")
        raw, s = s, translate(s, self.n.draft)
        for kw in s:
            if kw not in HANDLED:
                raise Refuse(kw, ptr(p, s.written(kw)), f"'{kw}' is not enforced by the grammar")
        values = self.enum_values(s, p)
        if values is not None:
            judge = raw
            own = "const" if "const" in s else "enum" if "enum" in s else None
            if own is not None and own in raw and raw[own] == s[own]:
                # each value is this keyword's own: judged by the others (an enum of n values against itself
                # is n x n equality checks: 2,661 values, 1 s)
                judge = {k: v for k, v in raw.items() if k != own}
            kept = [v for v in values if self.n.valid(v, judge, p)]
            return [Enum(kept)] if kept else []
        events = self.n.relax_events
        d = self.applicators(self.typed(s, p), s, p)
        if self.n.relax_events > events and any(k in s for k in APPLICATORS + ("contains",)):
            for kw in UNEVALUATED:  # what its parts evaluate was relaxed: this would be stricter
                if kw in s:
                    raise Refuse(kw, ptr(p, kw), f"{kw} beside a relaxed part")
        if any(k in s for k in APPLICATORS):
            if "unevaluatedProperties" in s:
                d = unevaluated_properties(self.n, d, s["unevaluatedProperties"], ptr(p, "unevaluatedProperties"))
        if any(k in s for k in APPLICATORS + ("contains",)):  # b_array left it to here
            if "unevaluatedItems" in s:
                d = unevaluated_items(self.n, d, s["unevaluatedItems"], ptr(p, "unevaluatedItems"))
        return d

    def enum_values(self, s, p):
        if "const" in s:
            return [s["const"]]
        if "enum" in s:
            if not isinstance(s["enum"], list):
                raise Refuse("enum", ptr(p, "enum"), "enum must be an array")
            return s["enum"]
        for part in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
            seen = 0
            part = translate(part, self.n.draft) if isinstance(part, dict) else part
            while isinstance(part, dict) and set(part) == {"$ref"} and seen < 16:
                part, seen = self.lookup(part["$ref"], ptr(p, "allOf")).contents, seen + 1
                part = translate(part, self.n.draft) if isinstance(part, dict) else part
            if isinstance(part, dict) and ("enum" in part or "const" in part):
                return self.enum_values(part, p)
        return None

    def lookup(self, ref, p, kw="$ref"):
        """Resolve ``ref`` (found at pointer ``p``) against the current base URI."""
        if not isinstance(ref, str):
            raise Refuse(kw, p, f"{kw} must be a string")
        try:
            return self.n.res.lookup(ref)
        except referencing.exceptions.Unresolvable as e:
            raise Refuse(kw, p,
                         f"reference {ref!r} does not resolve (remote references are never fetched)") from e

    def ref(self, ref, p, resolved=None) -> list:
        resolved = resolved or self.lookup(ref, p)
        node = resolved.contents
        key = (id(node), self.n.relax and self.negative == 0)  # a relaxed target is not the exact one
        if key in self.n.memo:
            self.n.relax_events += key in self.n.relaxed_targets  # what it evaluates was relaxed (unevaluated*)
            return self.n.memo[key]
        if key in self.n.active:
            self.n.cyclic.add(key)
            return [Ref(key)]
        self.n.active.add(key)
        self.n.keep.append(node)  # alive while the run lasts: ids stay unique
        old, self.n.res = self.n.res, resolved.resolver
        old_draft, self.n.draft = self.n.draft, draft_of(node, self.n.draft)  # a resource may name its own
        events = self.n.relax_events
        try:
            d = self.norm(node, p)
        finally:
            self.n.res, self.n.draft = old, old_draft
            self.n.active.discard(key)
        if self.n.relax_events > events:
            self.n.relaxed_targets.add(key)
        self.n.memo[key] = d
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
            if x in ("number", "integer"):
                b = number_branch(s, p, x)
            elif x in ("string", "array", "object"):
                b = {"string": string_branch, "array": self.b_array, "object": self.b_object}[x](s, p)
            else:
                b = plain(x)
            if b is not None:
                out.append(b)
        return out

    def b_array(self, s, p):
        b = {}
        if "prefixItems" in s:
            if not isinstance(s["prefixItems"], list):
                raise Refuse("prefixItems", at(s, p, "prefixItems"), "prefixItems must be an array")
            b["prefix"] = [self.norm(x, at(s, p, "prefixItems", i)) for i, x in enumerate(s["prefixItems"])] or None
        b["evaluated"] = len(b.get("prefix") or [])
        alone = not any(k in s for k in APPLICATORS)  # else unevaluated_items() applies it afterwards
        if "items" in s:
            b["items"], b["evaluated"] = self.norm(s["items"], at(s, p, "items")), True
        elif "unevaluatedItems" in s and alone and "contains" not in s:
            b["items"], b["evaluated"] = self.norm(s["unevaluatedItems"], ptr(p, "unevaluatedItems")), True
        for kw, name in (("minItems", "min_items"), ("maxItems", "max_items")):
            if kw in s:
                b[name] = count(s[kw], kw, ptr(p, kw))
        if "contains" in s:
            mn = count(s.get("minContains", 1), "minContains", ptr(p, "minContains"))
            mx = count(s["maxContains"], "maxContains", ptr(p, "maxContains")) if "maxContains" in s else None
            with exactly(self):
                c = self.norm(s["contains"], ptr(p, "contains"))
            b["contained"] = tuple(c)  # the items it matches are evaluated (unevaluatedItems)
            if mn != 0 or mx is not None:
                b["contains"] = ((c, mn, mx),)
        b = Array(at=p, **b)
        if s.get("uniqueItems") is True and not ((2 if b.max_items is None else b.max_items) <= 1):
            if b.contains:
                raise Refuse("uniqueItems", ptr(p, "uniqueItems"), "uniqueItems beside contains is not enforced")
            return unique_items(b, p)
        return check_array(b)

    def b_object(self, s, p):
        b = {}
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise Refuse("properties", ptr(p, "properties"), "properties must be an object")
        b["properties"] = {name: self.norm(sub, ptr(p, "properties", name)) for name, sub in props.items()}
        if "patternProperties" in s:
            pp = s["patternProperties"]
            if not isinstance(pp, dict):
                raise Refuse("patternProperties", ptr(p, "patternProperties"), "must be an object")
            if len(pp) > MAX_PATTERNS:
                raise Refuse("patternProperties", ptr(p, "patternProperties"),
                             f"more than {MAX_PATTERNS} patterns (each set of them is a class of keys)")
            for pat in pp:
                if key_regex(pat) is None:
                    raise Refuse("patternProperties", ptr(p, "patternProperties", pat), pattern_problem(pat))
            b["patterns"] = {pat: self.norm(sub, ptr(p, "patternProperties", pat)) for pat, sub in pp.items()}
        b["evaluated_names"], b["evaluated_patterns"] = frozenset(b["properties"]), tuple(b.get("patterns") or ())
        if "additionalProperties" in s:
            b["additional"] = self.norm(s["additionalProperties"], ptr(p, "additionalProperties"))
            b["evaluated_all"] = True
        elif "unevaluatedProperties" in s and not any(k in s for k in APPLICATORS):
            b["additional"] = self.norm(s["unevaluatedProperties"], ptr(p, "unevaluatedProperties"))
            b["evaluated_all"] = True
        if "required" in s:
            r = s["required"]
            if not isinstance(r, list) or not all(isinstance(x, str) for x in r):
                raise Refuse("required", ptr(p, "required"), "required must be an array of strings")
            b["required"] = tuple(dict.fromkeys(r))
        for kw, name in (("minProperties", "min_props"), ("maxProperties", "max_props")):
            if kw in s:
                b[name] = count(s[kw], kw, ptr(p, kw))
        if "propertyNames" in s:
            pn = self.norm(s["propertyNames"], ptr(p, "propertyNames"))
            names = [x for x in pn if isinstance(x, (String, Enum))]
            if not names:
                b["max_props"] = 0
            elif not (len(names) == 1 and is_plain(names[0])):
                b["names"] = names
                for name in b["properties"]:
                    if not self.n.valid(name, s["propertyNames"], ptr(p, "propertyNames")):
                        b["properties"][name] = []
        return self.complete_object(Object(at=p, **b))

    def complete_object(self, b):
        """List every required name in properties; drop the branch when a required key is impossible."""
        props, implied = dict(b.properties), set(b.implied)
        for r in b.required:
            if r not in props:
                props[r] = self.prop_schema(b, r)
                implied.add(r)
            if props[r] == []:
                return None
        if (b.min_props or 0) > (math.inf if b.max_props is None else b.max_props):
            return None
        return replace(b, properties=props, implied=frozenset(implied))

    def prop_schema(self, b, name):
        """What a value under key ``name`` must match in object branch ``b``."""
        parts = [d for pat, d in (b.patterns or {}).items() if re.search(pat, name)]
        if name in b.properties:
            parts.insert(0, b.properties[name])
        if not parts:
            return any_() if b.additional is None else b.additional
        out = parts[0]
        for d in parts[1:]:
            out = self.n.algebra.intersect(out, d, b.at, "patternProperties")
        return out

    def conjuncts(self, d, s, p) -> list:
        """The object's own keywords ``d`` ∧ ``$ref`` ∧ ``$dynamicRef``/``$recursiveRef`` ∧ the ``allOf``
        members, met in the order the schema wrote them (``properties`` marks where its own keys stand),
        so that properties come out in the schema's order."""
        parts = []  # (position in the schema object, pointer, keyword, branches)
        own = list(s).index("properties") if "properties" in s else -1
        for pos, kw in enumerate(s):
            if kw == "$ref":
                parts.append((pos, p, kw, self.ref(s[kw], ptr(p, kw))))
            elif kw in ("$dynamicRef", "$recursiveRef"):
                target = dynamic_target(self.n, kw, s[kw], ptr(p, kw))
                parts.append((pos, p, kw, self.ref(s[kw], ptr(p, kw), target)))
            elif kw == "allOf":
                parts += [(pos, ptr(p, kw, i), kw, self.norm(sub, ptr(p, kw, i))) for i, sub in enumerate(s[kw])]
        before = [x for x in parts if x[0] < own]
        if before:  # written before the object's own properties: their keys come first
            head = before[0][3]
            for _, q, kw, part in before[1:]:
                head = self.n.algebra.intersect(head, part, q, kw)
            d = self.n.algebra.intersect(head, d, before[0][1], before[0][2])
        for _, q, kw, part in parts[len(before):]:
            d = self.n.algebra.intersect(d, part, q, kw)
        return d

    def applicators(self, d, s, p) -> list:
        for kw in ("allOf", "anyOf", "oneOf"):
            if kw in s and (not isinstance(s[kw], list) or not s[kw]):
                raise Refuse(kw, ptr(p, kw), "must be a non-empty array of schemas")
        d = self.conjuncts(d, s, p)
        if "anyOf" in s:
            ds = [self.norm(sub, ptr(p, "anyOf", i)) for i, sub in enumerate(s["anyOf"])]
            u = [b for x in ds for b in x]
            # a relaxing run skips the (quadratic) test: "maybe overlapping" only makes unevaluated* go
            if len(ds) > 1 and (self.n.relax or not disjoint(self.n.algebra, ds, ptr(p, "anyOf"))):
                u = [replace(b, partial=True) if isinstance(b, (Object, Array)) else b for b in u]
            d = self.n.algebra.intersect(d, u, ptr(p, "anyOf"), "anyOf")
        if "oneOf" in s:
            d = one_of(self, s["oneOf"], ptr(p, "oneOf"), d)
        if "not" in s:
            q = ptr(p, "not")
            with exactly(self):
                negated = self.norm(s["not"], q)
            d = self.n.algebra.minus(d, negated, q, "not")
        if "if" in s:
            q = ptr(p, "if")
            with exactly(self):
                cond = self.norm(s["if"], q)
            then = self.norm(s.get("then", True), ptr(p, "then"))
            other = self.norm(s.get("else", True), ptr(p, "else"))
            alt = self.n.algebra.intersect(cond, then, q, "if") + self.n.algebra.minus(other, cond, q, "if")
            d = self.n.algebra.intersect(d, alt, q, "if")
        for kw in ("dependentRequired", "dependentSchemas"):
            deps = s.get(kw, {})
            if not isinstance(deps, dict):
                raise Refuse(kw, at(s, p, kw), f"{kw} must be an object")
            for key, dep in deps.items():
                q = at(s, p, kw, key)
                if kw == "dependentRequired":
                    dep = {"required": dep}
                only = frozenset([key])
                need = self.n.algebra.intersect([Object(properties={key: any_()}, required=(key,), at=q, implied=only)],
                                      self.norm(dep, q), q, kw)
                absent = [Object(properties={key: []}, at=q, implied=only)]
                others = [plain(t) for t in TYPES if t != "object"]
                d = self.n.algebra.intersect(d, others + absent + need, q, kw)
        return d
