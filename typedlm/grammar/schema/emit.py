"""Emission: branches -> the core-form JSON Schema (with typed :mod:`.ir` nodes for :mod:`.ebnf`).

One part of a :class:`.rewrites.Normalizer` run (``n``); it meets and complements through ``n.algebra``.
"""

from __future__ import annotations

import math

from .algebra import whole_match
from .branches import Array, Enum, NOTHING, Number, Object, Ref, String, any_, is_plain, needs_escape
from .ebnf import contains_automaton
from .ir import Contains, Core, Fraction, ItemClass, KeyClass, KeyClasses, Listed, Residues, Text
from .formats import BOUNDED_URI, PATTERNS
from .keys import (TooLarge, anything as any_key, lengths as key_lengths, meet, names as key_names,
                   pattern as key_pattern, spec as key_spec)
from .numbers import range_spec
from .refusal import Refuse, TYPES, key_regex, lookahead_split, rewrite_pattern, xgrammar_safe
from .strings import TooLarge as LengthsTooLarge, length_spec
from .weaken import loosened

MAX_ENUM = 256  # multipleOf between bounds: the most values it is enumerated as
FORMAT_REGEXES = frozenset(PATTERNS.values()) | {BOUNDED_URI}
MAX_MODULUS = 1000  # integers by residue (a multipleOf complement): one grammar rule per residue


class Emitter:
    """Branches to core-form JSON Schema."""

    def __init__(self, n):
        self.n = n  # the run (:class:`.rewrites.Normalizer`): its state and its other parts, named explicitly
        # build the automata only our EBNF reads (xgrammar): a string's :class:`.ir.Text`, an object's key
        # classes (:class:`.ir.KeyClasses`); off for llguidance's core form and for jsonschema probes, which
        # read the standard keywords beside them (same meaning)
        self.automata = n.automata
        self.exact = 0  # > 0: emitting where a relaxing run must stay exact (probes, contains classes)
        self.probes: dict[int, tuple] = {}  # id(branch) -> (branch, its probe schema)
        self.probe_defs: dict[int, dict] = {}  # $ref target key -> its definition in probes

    def emit(self, d) -> dict:
        if not d:
            return dict(NOTHING)
        plain = [b.type for b in d if is_plain(b)]
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

    def probe(self, b) -> dict:
        """Branch ``b`` as a schema jsonschema checks a value against (an enum filtered by ``b``): the standard
        keywords only (jsonschema reads no :mod:`.ir` node, whose automata took most of a probe's time and could
        refuse a branch the probe then dropped), patterns whole-match (:func:`.algebra.whole_match`), with the
        recursive definitions. Cached per branch and per definition (a branch is frozen, a definition final
        once in the memo): an enum meets the same branch again and again."""
        hit = self.probes.get(id(b))
        if hit is None:
            out = whole_match(self.standard(lambda: self.emit([b]), exact=True))
            if self.n.cyclic:
                out = {"allOf": [out], "$defs": {self.n.def_name(c): self.probe_def(c) for c in self.n.cyclic
                                                 if c in self.n.memo}}
            if self.n.cyclic <= self.n.memo.keys():  # else a definition still being built is left out
                self.probes[id(b)] = (b, out)  # b kept: its id stays its own
            return out
        return hit[1]

    def probe_def(self, key: int) -> dict:
        if key not in self.probe_defs:
            self.probe_defs[key] = whole_match(self.standard(lambda: self.emit(self.n.memo[key]), exact=True))
        return self.probe_defs[key]

    def standard(self, emit, exact: bool = False):
        """``emit()`` with the automata off: standard keywords only (``exact``: no relaxing either)."""
        saved, self.automata = self.automata, False
        self.exact += exact
        try:
            return emit()
        finally:
            self.automata = saved
            self.exact -= exact

    def emit_contains(self, b, out, pre):
        """Emitted array ``out`` (prefix ``pre``) with ``contains`` (and for the grammar, the item classes:
        :class:`.ir.Contains`); None when no array satisfies it. Exact even in a relaxing run (a looser
        class would count items differently): a refusal here relaxes the array."""
        self.exact += 1
        try:
            return self._contains(b, out, pre)
        finally:
            self.exact -= 1

    def _contains(self, b, out, pre):
        cs, q = b.contains, b.at
        negs = [self.n.algebra.complement(c, q, "contains") for c, _, _ in cs]

        def classes(base):  # mask of the contains an item matches -> the schema of such items
            out = []
            for mask in range(2 ** len(cs)):
                d = base
                for j, (c, _, _) in enumerate(cs):
                    d = self.n.algebra.intersect(d, c if mask >> j & 1 else negs[j], q, "contains")
                if d:
                    out.append(ItemClass(mask, self.emit(d)))
            return tuple(out)

        prefix = [classes(x) for x in pre]
        tail = classes(any_() if b.items is None else b.items)
        bounds = tuple((mn, mx) for _, mn, mx in cs)
        counted = counted_by_length(bounds, [{c.mask for c in x} for x in prefix + [tail]], out)
        if counted is not None:
            return out if counted else None
        try:
            auto = contains_automaton(bounds, out.get("minItems", 0), out.get("maxItems"),
                                      [{c.mask for c in x} for x in prefix], {c.mask for c in tail})
        except ValueError as e:
            raise Refuse("contains", q, str(e)) from None
        if auto is None:
            return None
        emitted = [{"contains": self.emit(c), **({"minContains": mn} if mn != 1 else {}),
                    **({"maxContains": mx} if mx is not None else {})} for c, mn, mx in cs]
        if len(emitted) == 1:
            out.update(emitted[0])
        else:
            out["allOf"] = emitted
        return Core(out, Contains(bounds, tuple(prefix), tail))

    def key_fsm(self, d, q):
        """The automaton of the strings that branches ``d`` (a propertyNames schema) accept; None: none."""
        out = None
        for x in d:
            if isinstance(x, Enum):
                vals = [v for v in x.values if isinstance(v, str)]
                f = key_names(vals) if vals else None
            elif isinstance(x, String):
                if x.format is not None:
                    raise Refuse("propertyNames", q, f"format {x.format!r} on property names is not enforced")
                f = key_lengths(x.min_length or 0, x.max_length)
                for rx in ((x.pattern,) if x.pattern is not None else ()) + x.also:
                    f = meet(f, key_pattern(rx))
                for rx in x.excluded:
                    f = meet(f, key_pattern(rx).everythingbut())
            else:
                continue
            if f is not None:
                out = f if out is None else out | f
        return out

    def key_classes(self, b) -> KeyClasses | None:
        """For the grammar (:mod:`.ebnf`): each listed name with the schema its value must match, and each
        class of other keys (the set of patterns a key matches) as an automaton with its value schema."""
        q = b.at
        if b.min_props is not None or b.max_props is not None:
            raise Refuse("minProperties" if b.min_props is not None else "maxProperties", q,
                         "property counts beside patternProperties/propertyNames are not enforced")
        props, pats = b.properties, list((b.patterns or {}).items())
        try:
            allowed = self.key_fsm(b.names, q) if b.names is not None else any_key()
            listed = []
            for name in props:
                d = self.n.builder.prop_schema(b, name) if allowed is not None and allowed.accepts(name) else []
                if not d and name in b.required:
                    return None
                listed.append(Listed(name, self.emit(d) if d else None, name in b.required))
            others = []
            if allowed is not None:
                if props:
                    allowed = meet(allowed, key_names(list(props)).everythingbut())
                fsms = [key_language(pat) for pat, _ in pats]
                for mask in range(2 ** len(pats)):
                    f = allowed
                    value = (any_() if b.additional is None else b.additional) if mask == 0 else any_()
                    for i, g in enumerate(fsms):
                        if mask >> i & 1:
                            f = meet(f, g)
                            value = self.n.algebra.intersect(value, pats[i][1], q, "patternProperties")
                        else:
                            f = meet(f, g.everythingbut())
                    spec = key_spec(f) if value else None
                    if spec is not None:
                        others.append(KeyClass(spec, self.emit(value)))
        except TooLarge as e:
            raise Refuse("patternProperties" if pats else "propertyNames", q, str(e)) from None
        return KeyClasses(tuple(listed), tuple(others))

    def emit_branch(self, b):
        """Branch ``b`` as a core-form node (None: no value); in a relaxing run a refusal here is
        relaxed (:func:`.weaken.loosened`) unless emission must stay exact."""
        if not self.n.relax or self.exact:
            return self.emit_exact(b)
        try:
            return self.emit_exact(b)
        except Refuse as r:
            return loosened(self.emit_exact, b, r, self.n.relaxed)

    def emit_exact(self, b):
        if isinstance(b, Ref):
            return {"$ref": "#/$defs/" + self.n.def_name(b.key)}
        if isinstance(b, Enum):
            return {"enum": b.values}
        if isinstance(b, Number):
            return self.emit_number(b)
        out = {"type": b.type}
        if isinstance(b, String):
            return emit_string(b, self.automata)
        elif isinstance(b, Array):
            pre = list(b.prefix or [])
            mx = b.max_items
            for i, x in enumerate(pre):
                if not x:
                    pre, mx = pre[:i], i if mx is None else min(mx, i)
                    break
            if pre:
                out["prefixItems"] = [self.emit(x) for x in pre]
            if b.items is not None and b.items != any_():
                out["items"] = False if not b.items else self.emit(b.items)
            if b.min_items:
                out["minItems"] = b.min_items
            if mx is not None:
                out["maxItems"] = mx
            if b.unique and (mx is None or mx > 1):
                out["uniqueItems"] = True  # the decode-time guard's keyword (grammar/unique)
            if out.get("minItems", 0) > out.get("maxItems", math.inf):
                return None
            if b.contains:
                return self.emit_contains(b, out, pre)
        elif isinstance(b, Object):
            props, pats = b.properties, b.patterns or {}
            # xgrammar lets any extra key through beside properties and patternProperties; it
            # mishandles names that need JSON escapes; one pattern alone it enforces
            classes = None
            if self.automata and (len(pats) > 1 or (props and pats) or b.names is not None
                                      or any(map(needs_escape, props))
                                      or not all(map(_xgrammar_reads_key, pats))):
                classes = self.key_classes(b)
                if classes is None:
                    return None
            if b.names is not None:
                out["propertyNames"] = self.emit(b.names)
            if props:
                out["properties"] = {n: self.emit(d) for n, d in props.items()}
            if pats:
                out["patternProperties"] = {key_regex(pat): self.emit(d) for pat, d in pats.items()}
            if b.required:
                out["required"] = list(b.required)
            if b.additional is not None and b.additional != any_():
                out["additionalProperties"] = False if not b.additional else self.emit(b.additional)
            if b.min_props:
                out["minProperties"] = b.min_props
            if b.max_props is not None:
                out["maxProperties"] = b.max_props
            if classes is not None:
                return Core(out, classes)
        return out

    def emit_number(self, b):
        if b.frac:
            if b.lo is not None or b.hi is not None:
                raise Refuse("type", b.at, "non-integral numbers between bounds are not enforced")
            return Core({"type": "number", "not": {"type": "integer"}}, Fraction())
        out = {"type": b.type}
        for side, (inc, exc) in (("lo", ("minimum", "exclusiveMinimum")), ("hi", ("maximum", "exclusiveMaximum"))):
            if getattr(b, side) is not None:
                v, excl = getattr(b, side)
                out[exc if excl else inc] = v
        if b.multiple_of is not None:
            out["multipleOf"] = b.multiple_of
        if b.not_multiple_of:
            out["not"] = {"anyOf": [{"multipleOf": n} for n in b.not_multiple_of]}
        if b.not_multiple_of or (b.multiple_of is not None and (b.lo is not None or b.hi is not None)):
            # xgrammar accepts -4 for multipleOf 3, minimum -10; and has no "not a multiple"
            return self.residues(b, out)
        if not b.integer and (b.lo is not None or b.hi is not None):
            try:  # xgrammar's own range admits at most 6 decimals (a stricter fallback)
                spec = range_spec(b.lo, b.hi)
            except (TooLarge, OverflowError):
                return out
            if spec is None:
                return None
            return Core(out, Text(spec, quoted=False))
        return out

    def residues(self, b, out):
        """Integers by remainder (``multipleOf`` beside bounds, or a complement of one) for :mod:`.ebnf`:
        the values near the bounds listed, the unbounded side (integers of more digits than the bound)
        by a remainder automaton. Bounds here are whole and inclusive (``algebra.fix_int``)."""
        m, ns = b.multiple_of or 1, b.not_multiple_of
        modulus = math.lcm(m, *ns)
        good = {r for r in range(modulus) if r % m == 0 and all(r % n for n in ns)}
        refuse = Refuse("multipleOf", b.at, f"multipleOf is enforced modulo at most {MAX_MODULUS} and with at most "
                        f"{MAX_ENUM} values listed near a bound")
        if modulus > MAX_MODULUS:
            raise refuse
        if not good:
            return None
        lo, hi = (None if x is None else x[0] for x in (b.lo, b.hi))
        pos = neg = None  # positive / negative integers of at least this many digits, beyond the list
        if lo is not None and hi is not None:
            first, last = lo, hi
        elif lo is not None:
            first, last = lo, 0 if lo <= 0 else 10 ** len(str(lo)) - 1
            pos = 1 if lo <= 0 else len(str(lo)) + 1
        elif hi is not None:
            first, last = 0 if hi >= 0 else -(10 ** len(str(-hi)) - 1), hi
            neg = 1 if hi >= 0 else len(str(-hi)) + 1
        else:
            first, last, pos, neg = 0, 0, 1, 1
        if last - first > MAX_ENUM * modulus:
            raise refuse
        values = [v for v in range(first, last + 1) if v % modulus in good]
        if len(values) > MAX_ENUM:
            raise refuse
        if pos is None and neg is None:
            return {"enum": values} if values else None
        return Core(out, Residues(modulus, tuple(sorted(good)), tuple(values), pos, neg))


def counted_by_length(bounds, masks: list[set], out: dict) -> bool | None:
    """``contains`` counts as the array's length where every item the array can hold matches it, and as 0
    where none does: then its bounds become ``minItems``/``maxItems`` of emitted array ``out`` (exact, and a
    form llguidance reads: it has no ``contains``). ``masks``: per prefix position, then for the items after,
    the classes (bit j: matches contains j) an item there can have. True: done; False: no array satisfies
    the bounds; None: some ``contains`` splits the items (the counter automaton is needed)."""
    lo, hi = out.get("minItems", 0), out.get("maxItems")
    for j, (mn, mx) in enumerate(bounds):
        bits = {m >> j & 1 for ms in masks for m in ms}
        if bits == {1}:  # count = length
            lo, hi = max(lo, mn), mx if hi is None else hi if mx is None else min(hi, mx)
        elif bits <= {0}:  # count = 0
            if mn > 0:
                return False
        else:
            return None
    if hi is not None and lo > hi:
        return False
    out.update({"minItems": lo} if lo else {}, **({"maxItems": hi} if hi is not None else {}))
    return True


def emit_string(b: String, automata: bool = True) -> dict | None:
    """A string branch. Patterns go to the grammar as their automaton (:mod:`.strings`: exact, JSON
    escapes included, lengths counted, several patterns intersected, excluded ones complemented) —
    required beside lengths or several patterns; else a format's regex, or a pattern whose automaton
    is too large, stays xgrammar's ``pattern``. Without ``automata`` (llguidance, probes): the standard
    keywords only, which mean the same."""
    out = {"type": "string", **{k: v for k, v in (("minLength", b.min_length), ("maxLength", b.max_length),
                                                 ("pattern", b.pattern), ("format", b.format)) if v is not None}}
    if b.also:
        out["allOf"] = [{"pattern": x} for x in b.also]
    if b.excluded:
        out["not"] = {"anyOf": [{"pattern": x} for x in b.excluded]}
    patterns = ((b.pattern,) if b.pattern is not None else ()) + b.also
    counted = b.min_length is not None or b.max_length is not None
    must = b.also or b.excluded or counted  # xgrammar's own lengths admit no JSON escape
    if not automata or not must and (b.pattern is None or b.pattern in FORMAT_REGEXES):
        return out
    try:
        spec = length_spec(patterns, b.excluded, b.min_length or 0, b.max_length)
    except LengthsTooLarge as e:
        if must:
            kw = "pattern" if b.also or b.excluded else "maxLength" if b.max_length is not None else "minLength"
            raise Refuse(kw, b.at, str(e)) from None
        if not xgrammar_safe(b.pattern):
            raise Refuse("pattern", b.at, f"{e}; xgrammar's own regex engine misreads an alternation beside "
                                          "a {m,n} range") from None
        return out
    if spec is None:
        return None
    return Core(out, Text(spec))


def key_language(pat: str):
    """The automaton of the names ``patternProperties`` pattern ``pat`` matches; ``^(?!X)Y`` as the names
    ``^Y`` matches minus those X excludes (:func:`.refusal.lookahead_split`): exact, a complement."""
    split = lookahead_split(pat)
    if split is None:
        return key_pattern(rewrite_pattern(pat))
    excluded, matched = split
    return meet(key_pattern(matched), key_pattern(excluded).everythingbut())


def _xgrammar_reads_key(pat: str) -> bool:
    """Whether xgrammar's own ``patternProperties`` reads ``pat`` right (no lookahead, a regex it reads)."""
    rx = rewrite_pattern(pat)
    return rx is not None and xgrammar_safe(rx)
