"""Intersection and complement of branch lists (exact, or :class:`.refusal.Refuse`).

One part of a :class:`.rewrites.Normalizer` run (``n``); enum filtering probes jsonschema with core forms
emitted by ``n.emitter``; object branches are completed by ``n.builder``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from fractions import Fraction
import math

from ...errors import GrammarCompileError
from .branches import (Array, Enum, KEYWORD, Number, Object, Ref, Scalar, String, any_, is_any, keywords, plain, same,
                       type_of)
from .refusal import Refuse, TYPES
from .subsume import prune

MAX_BRANCHES = 64  # a rewrite that needs more alternatives than this is refused (size, compile time)
MAX_CONTAINS = 3  # contains on one array (allOf): 2**n classes of items
MAX_MEETS = 100_000  # branch pairs one normalization may meet: the real-world schemas that compile need
# at most ~49,000 (SchemaStore's minecraft-recipe); past this a rewrite is refused by name in about a
# second instead of running for tens
MAX_UNFOLD = 8  # expansions of one recursive $ref inside one intersection (two recursive sides never end)


class Algebra:
    """Intersection (meet) and complement of branches."""

    def __init__(self, n):
        self.n = n  # the run (:class:`.rewrites.Normalizer`): its state and its other parts, named explicitly
        self.unfolding: dict = {}  # Ref key -> how many of its expansions the current meet is inside
        self.meets = 0  # branch pairs met so far in this run (MAX_MEETS)

    def intersect(self, x, y, p, kw) -> list:
        self.n.check_time()
        if is_any(x):
            return y
        if is_any(y):
            return x
        self.meets += len(x) * len(y)
        if self.meets > MAX_MEETS:  # the whole run stops (like its deadline): not a refusal to relax around
            raise GrammarCompileError(f"keyword {kw!r} at {p or '/'!r} is not enforced: the exact rewrite needs more "
                                      f"than {MAX_MEETS} intersections of branches", keyword=kw, pointer=p or "/")
        out = prune([c for a in x for b in y for c in self.meet(a, b, p, kw)])
        if len(out) > MAX_BRANCHES:
            raise Refuse(kw, p, f"the exact rewrite needs more than {MAX_BRANCHES} alternatives")
        return out

    def expand(self, b, p, kw):
        if b.key in self.n.active:
            raise Refuse(kw, p, "a recursive $ref inside an intersection or negation")
        return self.n.memo[b.key]

    @contextmanager
    def unfold(self, ref, p, kw):
        """The branches of recursive ``ref`` (:meth:`expand`), refused past MAX_UNFOLD nested unfoldings of it
        (a recursive schema met with, or complemented into, another recursive one never ends)."""
        if self.unfolding.get(ref.key, 0) >= MAX_UNFOLD:
            raise Refuse(kw, p, "a recursive $ref met with, or negated into, another recursive schema")
        self.unfolding[ref.key] = self.unfolding.get(ref.key, 0) + 1
        try:
            yield self.expand(ref, p, kw)
        finally:
            self.unfolding[ref.key] -= 1

    def meet(self, a, b, p, kw) -> list:
        if isinstance(a, Ref):
            with self.unfold(a, p, kw) as d:
                return self.intersect(d, [b], p, kw)
        if isinstance(b, Ref):
            with self.unfold(b, p, kw) as d:
                return self.intersect([a], d, p, kw)
        if isinstance(a, Enum) or isinstance(b, Enum):
            e, other = (a, b) if isinstance(a, Enum) else (b, a)
            if isinstance(other, Enum):
                kept = [v for v in e.values if any(same(v, w) for w in other.values)]
            else:
                probe = self.n.emitter.probe(other)
                kept = [v for v in e.values if self.n.valid(v, probe, p, core=True)]
            return [Enum(kept)] if kept else []
        if isinstance(a, Number) and isinstance(b, Number):
            out = self.m_number(a, b, p)
        elif type(a) is not type(b):
            return []
        elif isinstance(a, Scalar):
            out = a if a.type == b.type else None
        elif isinstance(a, String):
            out = self.m_string(a, b, p)
        elif isinstance(a, Array):
            out = self.m_array(a, b, p, kw)
        else:
            out = self.m_object(a, b, p, kw)
        return [out] if out is not None else []

    def m_number(self, a, b, p):
        out = Number(integer=a.integer or b.integer, at=a.at or p)
        for x in (a, b):
            for side in ("lo", "hi"):
                if getattr(x, side) is not None:
                    out = bound(out, side, getattr(x, side))
        ms = [x.multiple_of for x in (a, b) if x.multiple_of is not None]
        if ms:
            out = replace(out, multiple_of=math.lcm(*ms))
        if a.frac or b.frac:
            if out.integer or ms:  # non-integral numbers meet integers: nothing
                return None
            out = replace(out, frac=True)
        ns = tuple(dict.fromkeys(a.not_multiple_of + b.not_multiple_of))
        if ns:
            out = replace(out, not_multiple_of=ns)
        return fix_int(out)

    def m_string(self, a, b, p):
        out = {}
        lows = [x.min_length for x in (a, b) if x.min_length is not None]
        highs = [x.max_length for x in (a, b) if x.max_length is not None]
        formats = [x.format for x in (a, b) if x.format is not None]
        if len(formats) == 2 and formats[0] != formats[1]:
            raise Refuse("format", b.at or p, "two different formats on one string cannot be intersected")
        out["format"] = formats[0] if formats else None
        patterns = list(dict.fromkeys(x for y in (a, b) for x in ((y.pattern,) if y.pattern else ()) + y.also))
        out["pattern"], out["also"] = (patterns[0], tuple(patterns[1:])) if patterns else (None, ())
        out["excluded"] = tuple(dict.fromkeys(a.excluded + b.excluded))
        return check_string(String(min_length=max(lows) if lows else None, max_length=min(highs) if highs else None,
                                   at=a.at or p, **out))

    def m_array(self, a, b, p, kw):
        pa, pb = a.prefix or [], b.prefix or []
        n = max(len(pa), len(pb))
        prefix = [self.meet_opt(pa[i] if i < len(pa) else a.items, pb[i] if i < len(pb) else b.items, p, kw)
                  for i in range(n)] or None
        cs = a.contains + b.contains
        if len(cs) > MAX_CONTAINS:
            raise Refuse("contains", a.at or p, f"more than {MAX_CONTAINS} contains on one array")
        lows = [x.min_items for x in (a, b) if x.min_items is not None]
        highs = [x.max_items for x in (a, b) if x.max_items is not None]
        ia, ib = a.evaluated, b.evaluated
        return check_array(Array(
            prefix=prefix, items=self.meet_opt(a.items, b.items, p, kw), min_items=max(lows) if lows else None,
            max_items=min(highs) if highs else None, contains=cs, at=a.at or p,
            evaluated=True if ia is True or ib is True else max(ia, ib), contained=a.contained + b.contained,
            partial=a.partial or b.partial, unique=a.unique or b.unique))

    def meet_opt(self, x, y, p, kw):
        if x is None:
            return y
        if y is None:
            return x
        return self.intersect(x, y, p, kw)

    def m_object(self, a, b, p, kw):
        if a.patterns and b.patterns:
            raise Refuse("patternProperties", a.at or p, "two patternProperties cannot be intersected")
        props = {}
        for name in key_order(a, b):
            props[name] = self.intersect(self.n.builder.prop_schema(a, name), self.n.builder.prop_schema(b, name), p, kw)
        patterns = None
        for x, y in ((a, b), (b, a)):
            if x.patterns:
                patterns = {pat: self.meet_opt(d, y.additional, p, kw) for pat, d in x.patterns.items()}
        names = self.meet_opt(a.names, b.names, p, kw)
        highs = [x.max_props for x in (a, b) if x.max_props is not None] + ([0] if names == [] else [])
        lows = [x.min_props for x in (a, b) if x.min_props is not None]
        return self.n.builder.complete_object(Object(
            properties=props, patterns=patterns, additional=self.meet_opt(a.additional, b.additional, p, kw),
            required=tuple(dict.fromkeys(a.required + b.required)), min_props=max(lows) if lows else None,
            max_props=min(highs) if highs else None, names=names or None, at=a.at or p,
            evaluated_names=a.evaluated_names | b.evaluated_names,
            evaluated_patterns=tuple(dict.fromkeys(a.evaluated_patterns + b.evaluated_patterns)),
            evaluated_all=a.evaluated_all or b.evaluated_all, partial=a.partial or b.partial,
            implied=frozenset(n for n in props if n not in listed(a) and n not in listed(b))))

    def complement(self, d, p, kw) -> list:
        return self.minus(any_(), d, p, kw)

    def minus(self, x, d, p, kw) -> list:
        """``x ∧ ¬d``: ``x`` met with the complement of each branch of ``d`` in turn (``x`` keeps the
        intermediate lists small where ``¬d`` alone would multiply out)."""
        for b in d:
            if not x:
                return x
            if isinstance(b, Object) and b.additional is not None and not is_any(b.additional):
                # ¬additionalProperties names a key outside b's: known only within each branch of x
                x = prune([y for a in x for y in self.intersect([a], self.complement_branch(b, p, kw, a), p, kw)])
                continue
            if isinstance(b, Ref):
                with self.unfold(b, p, kw) as target:
                    c = self.complement(target, p, kw)
            else:
                c = self.complement_branch(b, p, kw)
            x = self.intersect(x, c, p, kw)
        return x

    def complement_branch(self, b, p, kw, within=None) -> list:
        """``¬b``, or only its part inside branch ``within`` (where a keyword's complement needs one)."""
        if isinstance(b, Enum):
            out = []
            for t in TYPES:
                vals = [v for v in b.values if type_of(v) == t]
                if not vals:
                    out.append(plain(t))
                elif t == "boolean":
                    rest = [v for v in (True, False) if not any(same(v, w) for w in vals)]
                    out += [Enum(rest)] if rest else []
                elif t == "string" and all(regex_safe(v) for v in vals):
                    out.append(String(pattern=not_strings(vals), at=p))
                elif t == "number":  # the open intervals between the values
                    cuts = sorted(set(Fraction(v) for v in vals))
                    out.append(Number(hi=(num(cuts[0]), True), at=p))
                    out += [Number(lo=(num(x), True), hi=(num(y), True), at=p) for x, y in zip(cuts, cuts[1:])]
                    out.append(Number(lo=(num(cuts[-1]), True), at=p))
                elif t != "null":
                    raise Refuse(kw, p, f"the complement of an enum of {t}s cannot be enforced")
            return out
        if isinstance(b, Number) and b.integer:
            # a non-integral number, another type, a number outside the bounds or the residues
            q = b.at or p
            out = [plain(u) for u in TYPES if u != "number"] + [Number(frac=True, at=q)]
            for k in ("lo", "hi"):
                if getattr(b, k) is not None:
                    out += self.complement_keyword(b, k, p, kw)
            if b.multiple_of is not None:
                out.append(Number(integer=True, not_multiple_of=(b.multiple_of,), at=q))
            out += [Number(integer=True, multiple_of=n, at=q) for n in b.not_multiple_of]
            return out
        out = [plain(u) for u in TYPES if u != b.type]
        keys = keywords(b)
        if isinstance(b, Object):
            if b.patterns is not None and all(is_any(d) for d in b.patterns.values()):
                keys.remove("patterns")  # constrains nothing
            if b.additional is not None and is_any(b.additional):
                keys.remove("additional")
        for k in keys:
            out += self.complement_keyword(b, k, p, kw, within)
        return out

    def complement_keyword(self, b, k, p, kw, within=None) -> list:
        q = b.at or p
        if isinstance(b, Number) and k == "frac":
            return [Number(integer=True, at=q)]
        if isinstance(b, Number) and k in ("lo", "hi"):
            v, excl = getattr(b, k)
            return [Number(**{"hi" if k == "lo" else "lo": (v, not excl)}, at=q)]
        pairs = {String: ("min_length", "max_length"), Array: ("min_items", "max_items"),
                 Object: ("min_props", "max_props")}
        if type(b) in pairs and k in pairs[type(b)]:
            lo, hi = pairs[type(b)]
            v = getattr(b, k)
            if k == lo:
                return [type(b)(**{hi: v - 1}, at=q)] if v > 0 else []
            return [type(b)(**{lo: v + 1}, at=q)]
        if isinstance(b, Array) and k == "prefix":  # some position i holds an item that fails prefixItems[i]
            out = []
            for i, d in enumerate(b.prefix):
                neg = self.complement(d, p, kw)
                if neg:
                    out.append(Array(prefix=[any_() for _ in range(i)] + [neg], min_items=i + 1, at=q))
            return out
        if isinstance(b, Array) and k == "items" and not b.prefix:  # some item fails items: contains ¬items
            neg = self.complement(b.items, p, kw)
            return [Array(contains=((neg, 1, None),), at=q)] if neg else []
        if isinstance(b, Array) and k == "contains":  # fewer than minContains matches, or more than maxContains
            out = []
            for c, mn, mx in b.contains:
                out += [Array(contains=((c, 0, mn - 1),), at=q)] if mn > 0 else []
                out += [Array(contains=((c, mx + 1, None),), at=q)] if mx is not None else []
            return out
        if isinstance(b, String) and k in ("pattern", "also"):  # matches one of them not
            return [String(excluded=(x,), at=q) for x in ((b.pattern,) if k == "pattern" else b.also)]
        if isinstance(b, String) and k == "excluded":  # matches one of them
            return [String(pattern=x, at=q) for x in b.excluded]
        if isinstance(b, Object) and k == "required":
            return [Object(properties={r: []}, at=q, implied=frozenset([r])) for r in b.required]
        if isinstance(b, Object) and k == "properties":
            out = []
            for name, d in b.properties.items():
                if name in b.required or d != any_():  # required: present and ¬S (¬required covers absent)
                    neg = self.complement(d, p, kw)
                    out += [Object(properties={name: neg}, required=(name,), at=q, implied=frozenset([name]))] if neg else []
            return out
        if isinstance(b, Object) and k == "additional" and within is not None and not b.patterns:
            return self.other_key(b, within, p, kw)
        raise Refuse(kw, p, f"the complement of '{KEYWORD.get(k, k)}' on {b.type}s cannot be enforced")

    def other_key(self, b, within, p, kw) -> list:
        """Objects of branch ``within`` with a key ``b`` does not list whose value fails ``b``'s
        ``additionalProperties``: one branch per such key, when ``within`` allows only listed keys."""
        if isinstance(within, (Scalar, Number, String, Array)):
            return []  # not an object: no object is inside it
        if not isinstance(within, Object) or within.additional != [] or within.patterns or within.names is not None:
            raise Refuse(kw, p, "the complement of 'additionalProperties' on objects cannot be enforced")
        neg = self.complement(b.additional, p, kw)
        return [Object(properties={name: neg}, required=(name,), at=b.at or p, implied=frozenset([name]))
                for name, d in within.properties.items() if d != [] and name not in b.properties] if neg else []


def listed(b) -> list[str]:
    """The property names object branch ``b`` lists itself (not only through ``required``), in order."""
    return [n for n in b.properties if n not in b.implied]


def key_order(a, b) -> list[str]:
    """Property names of ``a`` ∧ ``b`` in the order the schema wrote them: the names ``a`` lists, then
    those ``b`` lists, then names known only from ``required`` (an intersection never moves a key)."""
    return list(dict.fromkeys(listed(a) + listed(b) + list(a.properties) + list(b.properties)))


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
        elif k in ("properties", "$defs"):
            out[k] = {name: whole_match(x) for name, x in v.items()}
        elif k in ("anyOf", "allOf", "prefixItems", "items", "additionalProperties", "contains", "propertyNames",
                   "not"):
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


def num(f: Fraction):
    """A Fraction made of a JSON number back into that number (int when whole)."""
    return int(f) if f.denominator == 1 else float(f)


def bound(b, side, new):
    """Tighten the lower ('lo') or upper ('hi') bound ``(value, exclusive)`` of a number branch."""
    old = getattr(b, side)
    if old is None:
        return replace(b, **{side: new})
    (v0, e0), (v1, e1) = old, new
    if v0 == v1:
        keep = (v0, e0 or e1)
    elif side == "lo":
        keep = new if Fraction(v1) > Fraction(v0) else old
    else:
        keep = new if Fraction(v1) < Fraction(v0) else old
    return replace(b, **{side: keep})


def fix_int(b):
    """Integer bounds become whole and inclusive (xgrammar needs whole numbers); empty ranges -> None."""
    if b.integer:
        if b.lo is not None:
            v, excl = b.lo
            b = replace(b, lo=(math.floor(v) + 1 if excl else math.ceil(v), False))
        if b.hi is not None:
            v, excl = b.hi
            b = replace(b, hi=(math.ceil(v) - 1 if excl else math.floor(v), False))
    if b.lo is not None and b.hi is not None:
        (lo, le), (hi, he) = b.lo, b.hi
        if Fraction(lo) > Fraction(hi) or (lo == hi and (le or he)):
            return None
    return b


def check_string(b):
    if b.format and (b.min_length is not None or b.max_length is not None):
        kw = "minLength" if b.min_length is not None else "maxLength"
        raise Refuse(kw, b.at, f"{kw} beside format {b.format!r} is not enforced by the grammar")
    if (b.pattern or b.excluded) and b.format:
        raise Refuse("format", b.at, "format beside pattern is not enforced by the grammar")
    if (b.min_length or 0) > (math.inf if b.max_length is None else b.max_length):
        return None
    return b


def check_array(b):
    if (b.min_items or 0) > (math.inf if b.max_items is None else b.max_items):
        return None
    return b
