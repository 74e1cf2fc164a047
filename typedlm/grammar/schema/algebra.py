"""Intersection and complement of branch lists (exact, or :class:`.refusal.Refuse`).

A mixin of :class:`.rewrites.Normalizer`; enum filtering probes jsonschema with emitted core forms.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

from ...errors import GrammarCompileError
from .branches import META, any_, is_any, same, type_of
from .refusal import TYPES, Refuse

MAX_BRANCHES = 64  # a rewrite that needs more alternatives than this is refused (size, compile time)
MAX_CONTAINS = 3  # contains on one array (allOf): 2**n classes of items


class Algebra:
    """Intersection (meet) and complement of branches."""

    def check_time(self):
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise GrammarCompileError("rewriting the schema ran past the compile time limit")

    def intersect(self, x, y, p, kw) -> list:
        self.check_time()
        if is_any(x):
            return y
        if is_any(y):
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
                kept = [v for v in e["enum"] if any(same(v, w) for w in other["enum"])]
            else:
                probe = whole_match(self.emit_standalone([other]))
                kept = [v for v in e["enum"] if self.valid(v, probe, p, core=True)]
            return [{"enum": kept}] if kept else []
        ta, tb = a["type"], b["type"]
        if ta != tb and {ta, tb} != {"number", "integer"}:
            return []
        t = "integer" if "integer" in (ta, tb) else ta
        m = getattr(self, "m_" + t, None)
        out = {**a, **b, "type": t, "@": a.get("@", b.get("@", p))} if m is None else m(a, b, p, kw)
        if out is not None and t in ("object", "array"):
            out.update(merge_meta(a, b))
        return [out] if out is not None else []

    def m_number(self, a, b, p, kw, kind="number"):
        out = {"type": kind, "@": a.get("@", p)}
        for side in ("lo", "hi"):
            for x in (a, b):
                if side in x:
                    out = bound(out, side, x[side])
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
        return fix_int(out)

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
        return check_string(out)

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
        return check_array(out)

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

    def complement(self, d, p, kw) -> list:
        out = any_()
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
                vals = [v for v in b["enum"] if type_of(v) == t]
                if not vals:
                    out.append({"type": t})
                elif t == "boolean":
                    rest = [v for v in (True, False) if not any(same(v, w) for w in vals)]
                    out += [{"enum": rest}] if rest else []
                elif t == "string" and all(regex_safe(v) for v in vals):
                    out.append({"type": "string", "@": p, "pattern": not_strings(vals)})
                elif t == "number":  # the open intervals between the values
                    cuts = sorted(set(Fraction(v) for v in vals))
                    out.append({"type": "number", "@": p, "hi": (num(cuts[0]), True)})
                    out += [{"type": "number", "@": p, "lo": (num(x), True), "hi": (num(y), True)}
                            for x, y in zip(cuts, cuts[1:])]
                    out.append({"type": "number", "@": p, "lo": (num(cuts[-1]), True)})
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
            if all(is_any(d) for d in b.get("patternProperties", {}).values()):
                keys -= {"patternProperties"}  # constrains nothing
            if "additionalProperties" in b and is_any(b["additionalProperties"]):
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
                    out.append({"type": "array", "@": q, "prefixItems": [any_() for _ in range(i)] + [neg],
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
                elif d != any_():
                    neg = self.complement(d, p, kw)
                    out += [{"type": "object", "@": q, "properties": {name: neg}, "required": [name]}] if neg else []
            return out
        raise Refuse(kw, p, f"the complement of '{kw_name(k)}' on {t}s cannot be enforced")


def whole_match(core):
    """A core-form schema for jsonschema: its patterns match whole strings (as in xgrammar), where
    jsonschema searches. Without this a probe's ``(...){0,1}`` matched every string."""
    if isinstance(core, list):
        return [whole_match(x) for x in core]
    if not isinstance(core, dict):
        return core
    out = {}
    for k, v in core.items():
        if k == "pattern":
            out[k] = f"^(?:{v})\\Z"
        elif k == "patternProperties":
            out[k] = {f"^(?:{pat})\\Z": whole_match(x) for pat, x in v.items()}
        elif k in ("properties", "$defs", "x-typedlm-contains"):
            out[k] = {name: whole_match(x) for name, x in v.items()}
        elif k in ("anyOf", "allOf", "prefixItems", "items", "additionalProperties", "contains", "propertyNames"):
            out[k] = whole_match(v)
        else:
            out[k] = v
    return out


def regex_safe(text: str) -> bool:
    """Characters a JSON string holds unescaped and a regex can name as \\uXXXX."""
    return all(0x20 <= ord(c) <= 0xFFFF and c not in '"\\' for c in text)


def not_strings(values) -> str:
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


def merge_meta(a, b) -> dict:
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


def num(f: Fraction):
    """A Fraction made of a JSON number back into that number (int when whole)."""
    return int(f) if f.denominator == 1 else float(f)


def kw_name(k):
    return {"lo": "minimum", "hi": "maximum"}.get(k, k)


def bound(b, side, new):
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


def fix_int(b):
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


def check_string(b):
    if ("pattern" in b or "format" in b) and ("minLength" in b or "maxLength" in b):
        kw = "minLength" if "minLength" in b else "maxLength"
        raise Refuse(kw, b.get("@", ""), f"{kw} beside pattern/format is not enforced by the grammar")
    if "pattern" in b and "format" in b:
        raise Refuse("format", b.get("@", ""), "format beside pattern is not enforced by the grammar")
    if b.get("minLength", 0) > b.get("maxLength", math.inf):
        return None
    return b


def check_array(b):
    if b.get("minItems", 0) > b.get("maxItems", math.inf):
        return None
    return b
