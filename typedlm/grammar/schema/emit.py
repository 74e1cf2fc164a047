"""Emission: branches -> the core-form JSON Schema (with ``x-typedlm-*`` nodes for :mod:`.ebnf`).

A mixin of :class:`.rewrites.Normalizer`.
"""

from __future__ import annotations

import math

from .branches import NOTHING, any_, is_plain, needs_escape
from .ebnf import contains_automaton
from .keys import TooLarge, anything as any_key, lengths as key_lengths, names as key_names
from .keys import pattern as key_pattern, spec as key_spec
from .refusal import TYPES, Refuse, rewrite_pattern

MAX_ENUM = 256  # multipleOf between bounds: the most values it is enumerated as
MAX_MODULUS = 1000  # integers by residue (a multipleOf complement): one grammar rule per residue


class Emitter:
    """Branches to core-form JSON Schema."""

    def emit(self, d) -> dict:
        if not d:
            return dict(NOTHING)
        plain = [b["type"] for b in d if is_plain(b)]
        if set(TYPES) <= set(plain):
            return {}
        branches = []
        if plain:
            branches.append({"type": plain[0] if len(plain) == 1 else list(dict.fromkeys(plain))})
        for b in d:
            if not is_plain(b):
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
        tail = classes(b["items"]) if "items" in b else classes(any_())
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
                    f, value = allowed, b.get("additionalProperties", any_()) if mask == 0 else any_()
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
            if "items" in b and b["items"] != any_():
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
            if len(pats) > 1 or (props and pats) or "propertyNames" in b or any(map(needs_escape, props)):
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
            if add is not None and add != any_():
                out["additionalProperties"] = False if not add else self.emit(add)
            for k in ("minProperties", "maxProperties"):
                if k in b and (k == "maxProperties" or b[k] > 0):
                    out[k] = b[k]
        return out
