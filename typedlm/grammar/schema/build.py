"""Building: a schema object (draft-translated) -> branches; references, applicators, unevaluated*.

A mixin of :class:`.rewrites.Normalizer` (state: the resolver, memo of ``$ref`` targets, draft).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import replace

import referencing.exceptions

from .algebra import bound, check_array, check_string, fix_int
from .branches import (Array, Enum, Number, Object, Ref, String, any_, at, count, finite, is_any, is_num, is_plain,
                       plain, same)
from .drafts import DEFAULT, draft_of, translate
from .formats import LENGTHS as FORMAT_LENGTHS, NOT_EXACT, PATTERNS as FORMAT_PATTERNS, XGRAMMAR, known
from .refusal import JSON_TYPES, TYPES, Refuse, pattern_problem, ptr, rewrite_pattern

MAX_ENUM = 256  # the most arrays uniqueItems may enumerate
MAX_PATTERNS = 4  # patternProperties: 2**n classes of keys
APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "$ref", "$dynamicRef", "$recursiveRef", "dependentSchemas")
# validating keywords (2020-12 form, see drafts.translate) the normalizer handles; any other
# validating keyword is refused by name, and annotations never reach it
HANDLED = DEFAULT.validating | {"$recursiveRef"}


class Builder:
    """Schema objects to branches."""

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
            return any_()
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
            return [Enum(kept)] if kept else []
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
            _refuse_unknown_evaluation(b, dict, "unevaluatedProperties", q, "keys", "objects")
            if not isinstance(b, Object) or b.evaluated_all:
                out.append(b)
                continue
            if b.partial:
                raise Refuse("unevaluatedProperties", q, "anyOf branches that overlap: which of them "
                             "evaluated a key depends on the instance")
            props = {name: d if name in b.evaluated_names or any(re.search(pt, name) for pt in b.evaluated_patterns)
                     else self.intersect(d, u, q, "unevaluatedProperties") for name, d in b.properties.items()}
            b = self.complete_object(replace(b, properties=props, additional=u, evaluated_all=True))
            if b is not None:
                out.append(b)
        return out

    def unevaluated_items(self, d, sub, q) -> list:
        """Apply ``unevaluatedItems`` to the positions no prefixItems/items of the branch's parts evaluated."""
        u = self.norm(sub, q)
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
            pre = [x if i < b.evaluated else self.intersect(x, ub, q, "unevaluatedItems")
                   for i, x in enumerate(b.prefix or [])]
            out.append(replace(b, prefix=pre or None, evaluated=True,
                               items=self.meet_opt(b.items, ub, q, "unevaluatedItems")))
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
                and self.draft.spec.id_of(self.root) and owner(self.root, root.contents, self.draft):
            return root
        docs = [self.root] + [self.registry[u].contents for u in self.registry if self.registry[u].contents
                              is not self.root]
        if sum(count_nodes(doc, hit) for doc in docs) == 1:
            return resolved
        raise Refuse(kw, p, "the target depends on the dynamic scope (several resources define the anchor)")

    def ref(self, ref, p, resolved=None) -> list:
        resolved = resolved or self.lookup(ref, p)
        node, key = resolved.contents, id(resolved.contents)
        if key in self.memo:
            return self.memo[key]
        if key in self.active:
            self.cyclic.add(key)
            return [Ref(key)]
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
                else plain(x)
            if b is not None:
                out.append(b)
        return out

    def b_integer(self, s, p):
        return self.b_number(s, p, "integer")

    def b_number(self, s, p, kind="number"):
        b = Number(integer=kind == "integer", at=p)
        for kw, side, excl in (("minimum", "lo", False), ("exclusiveMinimum", "lo", True),
                               ("maximum", "hi", False), ("exclusiveMaximum", "hi", True)):
            if kw in s:
                if not is_num(s[kw]):
                    raise Refuse(kw, at(s, p, kw), f"{kw} must be a number")
                b = bound(b, side, (s[kw], excl))
        if "multipleOf" in s:
            m = s["multipleOf"]
            if not is_num(m) or m <= 0:
                raise Refuse("multipleOf", ptr(p, "multipleOf"), "multipleOf must be a positive number")
            if float(m) != int(m):
                raise Refuse("multipleOf", ptr(p, "multipleOf"), "a non-integer multipleOf is not enforced")
            b = replace(b, integer=True, multiple_of=int(m) if int(m) != 1 else None)
        return fix_int(b)

    def b_string(self, s, p):
        b = {}
        if "minLength" in s and count(s["minLength"], "minLength", ptr(p, "minLength")) > 0:
            b["min_length"] = int(s["minLength"])
        if "maxLength" in s:
            b["max_length"] = count(s["maxLength"], "maxLength", ptr(p, "maxLength"))
        if "pattern" in s:
            rw = rewrite_pattern(s["pattern"])
            if rw is None:
                raise Refuse("pattern", ptr(p, "pattern"), pattern_problem(s["pattern"]))
            b["pattern"] = rw
        f = s.get("format")
        if "format" in s and not isinstance(f, str):
            raise Refuse("format", ptr(p, "format"), "format must be a string")
        if f is None or not known(f):
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
            if b.get("min_length", 0) <= lo:  # implied by the format: Pydantic's AnyUrl has minLength 1
                b.pop("min_length", None)
            if hi is not None and b.get("max_length", math.inf) >= hi:
                b.pop("max_length", None)
        return check_string(String(at=p, **b))

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
            c = self.norm(s["contains"], ptr(p, "contains"))
            b["contained"] = tuple(c)  # the items it matches are evaluated (unevaluatedItems)
            if mn != 0 or mx is not None:
                b["contains"] = ((c, mn, mx),)
        b = Array(at=p, **b)
        if s.get("uniqueItems") is True and not ((2 if b.max_items is None else b.max_items) <= 1):
            if b.contains:
                raise Refuse("uniqueItems", ptr(p, "uniqueItems"), "uniqueItems beside contains is not enforced")
            return self.unique_items(b, p)
        return check_array(b)

    def unique_items(self, b, p):
        """uniqueItems over a finite array space (every position an enum, boolean or null, and a
        bounded length): every array of distinct values, as an enum."""
        pre, items = b.prefix or [], b.items
        hi = b.max_items
        if items == []:
            hi = len(pre) if hi is None else min(hi, len(pre))
        refuse = Refuse("uniqueItems", ptr(p, "uniqueItems"),
                        "uniqueItems is enforced only on arrays of at most one item or of a small finite space")
        if hi is None and items is not None and finite(items) is not None:
            hi = len(pre) + len(finite(items))  # distinct items from a finite set: no longer than that
        if hi is None:
            raise refuse
        pos = [finite(pre[i] if i < len(pre) else items) for i in range(hi)]
        if any(v is None for v in pos) or math.prod(max(1, len(v)) for v in pos) > 4096:
            raise refuse
        arrays = []
        for k in range(b.min_items or 0, hi + 1):
            for combo in itertools.product(*pos[:k]):
                if all(not same(x, y) for i, x in enumerate(combo) for y in combo[i + 1:]):
                    arrays.append(list(combo))
        if len(arrays) > MAX_ENUM:
            raise refuse
        return Enum(arrays) if arrays else None

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
                if rewrite_pattern(pat) is None:
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
                    if not self.valid(name, s["propertyNames"], ptr(p, "propertyNames")):
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
            out = self.intersect(out, d, b.at, "patternProperties")
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
                target = self.dynamic(kw, s[kw], ptr(p, kw))
                parts.append((pos, p, kw, self.ref(s[kw], ptr(p, kw), target)))
            elif kw == "allOf":
                parts += [(pos, ptr(p, kw), kw, self.norm(sub, ptr(p, kw, i))) for i, sub in enumerate(s[kw])]
        before = [x for x in parts if x[0] < own]
        if before:  # written before the object's own properties: their keys come first
            head = before[0][3]
            for _, q, kw, part in before[1:]:
                head = self.intersect(head, part, q, kw)
            d = self.intersect(head, d, before[0][1], before[0][2])
        for _, q, kw, part in parts[len(before):]:
            d = self.intersect(d, part, q, kw)
        return d

    def applicators(self, d, s, p) -> list:
        for kw in ("allOf", "anyOf", "oneOf"):
            if kw in s and (not isinstance(s[kw], list) or not s[kw]):
                raise Refuse(kw, ptr(p, kw), "must be a non-empty array of schemas")
        d = self.conjuncts(d, s, p)
        if "anyOf" in s:
            ds = [self.norm(sub, ptr(p, "anyOf", i)) for i, sub in enumerate(s["anyOf"])]
            u = [b for x in ds for b in x]
            if len(ds) > 1 and not self.disjoint(ds, ptr(p, "anyOf")):
                u = [replace(b, partial=True) if isinstance(b, (Object, Array)) else b for b in u]
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
                raise Refuse(kw, at(s, p, kw), f"{kw} must be an object")
            for key, dep in deps.items():
                q = at(s, p, kw, key)
                if kw == "dependentRequired":
                    dep = {"required": dep}
                only = frozenset([key])
                need = self.intersect([Object(properties={key: any_()}, required=(key,), at=q, implied=only)],
                                      self.norm(dep, q), q, kw)
                absent = [Object(properties={key: []}, at=q, implied=only)]
                others = [plain(t) for t in TYPES if t != "object"]
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


def count_nodes(doc, hit) -> int:
    """How many schema objects in ``doc`` (any depth) satisfy ``hit``."""
    if isinstance(doc, dict):
        return int(hit(doc)) + sum(count_nodes(v, hit) for v in doc.values())
    if isinstance(doc, list):
        return sum(count_nodes(v, hit) for v in doc)
    return 0


def owner(root, node, draft) -> bool:
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


def _refuse_unknown_evaluation(b, kind: type, keyword: str, q: str, what: str, values: str) -> None:
    """``unevaluated*`` needs to know what a branch evaluated: not known through a recursive ``$ref`` or an
    enum of objects/arrays."""
    if isinstance(b, Ref) or (isinstance(b, Enum) and any(isinstance(v, kind) for v in b.values)):
        raise Refuse(keyword, q, f"which {what} were evaluated is unknown here "
                                 f"(a recursive $ref or an enum of {values})")
