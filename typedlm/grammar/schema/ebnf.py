"""Core form -> what xgrammar compiles: the JSON Schema itself, or EBNF where xgrammar's converter falls short.

The normalizer (:mod:`.rewrites`) emits a core-form schema that jsonschema reads with its usual meaning.
A few core nodes are typed (:class:`.ir.Core`), carrying what the grammar needs and xgrammar's JSON Schema
subset cannot say:

- :class:`.ir.Contains` on an array: the item schema split into classes by the set of ``contains``
  constraints an item matches. The array is a sequence of such items whose count per constraint lies in
  ``[minContains, maxContains]`` and whose length lies in ``[minItems, maxItems]``: a finite counter
  automaton (:func:`contains_automaton`), written as one EBNF rule per state.
- :class:`.ir.KeyClasses`: listed names in order, then other keys in classes (automata from
  :mod:`.keys`), each with its value schema.
- :class:`.ir.Residues`: integers by remainder (``multipleOf`` beside bounds, or its complement).
- :class:`.ir.Fraction`: non-integral numbers.
- :class:`.ir.Text`: a pattern beside ``minLength``/``maxLength`` (:mod:`.strings`): the pattern's
  automaton times a length counter; lengths alone: any character (JSON escapes included) ``{lo,hi}``;
  unquoted, a number between bounds (:mod:`.numbers`): the automaton of its text.

When no node is typed, the schema goes to ``compile_json_schema`` as before. Otherwise each such node
is replaced by a placeholder string constant and its sub-schemas are moved to ``$defs``; xgrammar
converts that document to EBNF (rule ``defs_<name>`` per definition), and each placeholder literal is
replaced by a rule of ours built from those definition rules.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import secrets

import xgrammar as xgr

from ...errors import GrammarCompileError
from .ir import Contains, Core, Fraction, KeyClasses, Residues, Text, with_keywords
from .strings import live_states, loop_class, product

# A non-integral number: below 1e9 in magnitude, 1 to 6 decimals, the last one not 0. At most 15
# digits in all, so that a double (how jsonschema, Python and JavaScript read JSON numbers) holds it
# exactly enough to be non-integral too ("1.00000000000000001" reads as 1.0). Stricter than the
# schema (no exponents, no longer numbers): a documented exception to "refuse, don't approximate",
# like the three formats in formats.py; never looser.
FRACTION = '("-" | "") ("0" | [1-9] [0-9]{0,8}) "." [0-9]{0,5} [1-9]'
MAX_STATES = 4096  # counter automaton states (count × length) before the keyword is refused
_HOLE = "typedlm-hole-"


def ebnf_literal(text: str) -> str:
    """An EBNF string literal matching exactly ``text`` (every non-alphanumeric char escaped)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise GrammarCompileError(f"text {text!r} is not valid Unicode (lone surrogate)") from e
    return '"' + "".join(ch if ch.isascii() and ch.isalnum() else f"\\U{ord(ch):08X}" for ch in text) + '"'


def contains_automaton(bounds, lo: int, hi: int | None, prefix: list[set], tail: set):
    """The counter automaton of an array under ``contains`` constraints ``bounds`` (``[min, max]`` per
    constraint, max None: unbounded) and length bounds ``lo``/``hi``. An item is of a *class*: the mask
    of the constraints it matches; ``prefix[i]`` holds the classes an item at position i can have,
    ``tail`` those of later items. States ``(counts, length, started)``; counts and lengths above the
    largest bound that matters are merged. Returns ``(start, {state: (may_end, [(class, next)])})``
    over live states, or None when no array satisfies the bounds. ValueError past :data:`MAX_STATES`."""
    caps = [mx if mx is not None else mn for mn, mx in bounds]
    cap_l = hi if hi is not None else max(lo, len(prefix))
    size = math.prod(c + 1 for c in caps) * (cap_l + 1) * 2
    if size > MAX_STATES:
        raise ValueError(f"contains needs more than {MAX_STATES} counter states")
    moves = {}
    for counts in itertools.product(*(range(c + 1) for c in caps)):
        for n in range(cap_l + 1):
            for started in (False, True):
                out = []
                if hi is None or n < hi:
                    n2 = n + 1 if hi is not None else min(n + 1, cap_l)
                    for mask in sorted(prefix[n] if n < len(prefix) else tail):
                        nxt, ok = [], True
                        for j, ((mn, mx), c) in enumerate(zip(bounds, counts)):
                            hit = mask >> j & 1
                            ok = ok and not (hit and mx is not None and c >= mx)
                            nxt.append(min(c + hit, caps[j]))
                        if ok:
                            out.append((mask, (tuple(nxt), n2, True)))
                end = n >= lo and all(c >= mn for (mn, _), c in zip(bounds, counts))
                moves[(counts, n, started)] = (end, out)
    live = live_states(moves)
    start = (tuple(0 for _ in bounds), 0, False)
    if start not in live:
        return None
    reach, todo = {start}, [start]
    while todo:
        for _, nx in moves[todo.pop()][1]:
            if nx in live and nx not in reach:
                reach.add(nx)
                todo.append(nx)
    return start, {st: (moves[st][0], [(k, nx) for k, nx in moves[st][1] if nx in live]) for st in reach}


def _letters(i: int) -> str:
    """0 -> 'a', 25 -> 'z', 26 -> 'ba': rule-safe names (xgrammar drops digits from $defs names)."""
    out = ""
    while True:
        out = chr(ord("a") + i % 26) + out
        i //= 26
        if i == 0:
            return out


class _Builder:
    def __init__(self, ws: str):
        self.ws = ws  # EBNF between tokens ("" when compact)
        self.nonce = secrets.token_hex(8)  # placeholders no schema's own string constant can equal
        self.defs: dict[str, object] = {}
        self.rules: list[str] = []
        self.holes: dict[str, str] = {}  # rule name -> its placeholder string
        self.loops: dict[tuple, str] = {}  # (character class, lo, hi) -> the rule of that counted string

    def define(self, schema) -> str:
        name = "typedlmdef" + _letters(len(self.defs))
        self.defs[name] = None
        self.defs[name] = self.walk(schema)
        return name

    def walk(self, node):
        if isinstance(node, list):
            return [self.walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        if isinstance(node, Core):
            ir = node.ir
            if isinstance(ir, Contains):
                return self.contains(ir, node.get("minItems", 0), node.get("maxItems"))
            if isinstance(ir, KeyClasses):
                return self.object(ir)
            if isinstance(ir, Residues):
                return self.residues(ir)
            if isinstance(ir, Fraction):
                return self.hole("typedlm_fraction", FRACTION)
            if isinstance(ir, Text):
                return self.string(ir.spec, quote='"\\""' if ir.quoted else "")
            raise GrammarCompileError(f"internal: no EBNF for {type(ir).__name__}")
        return {k: (v if k in ("enum", "const") else self.walk(v)) for k, v in node.items()}

    def hole(self, rule: str, body: str | None = None) -> dict:
        """A placeholder constant that stands for ``rule`` (defined here from ``body`` the first time)."""
        if rule not in self.holes:
            self.holes[rule] = f"{_HOLE}{self.nonce}-{_letters(len(self.holes))}"
            if body is not None:
                self.rules.append(f"{rule} ::= {body}")
        return {"const": self.holes[rule]}

    def residues(self, spec: Residues) -> dict:
        """Integers: the listed values, and positive / negative ones of at least ``pos`` / ``neg`` digits
        whose remainder modulo ``modulus`` is in ``residues``, read digit by digit by a remainder
        automaton (state: remainder of the digits so far, digit count up to the minimum); for a
        negative number -a, a's remainder must be the negation of an allowed one."""
        rule = f"typedlm_residues_{_letters(len(self.holes))}"
        modulus, ok = spec.modulus, set(spec.residues)
        alts = [f'"{v}"' for v in spec.values]
        for sign, k, good in (("pos", spec.pos, ok), ("neg", spec.neg, {(-r) % modulus for r in ok})):
            if not k:
                continue
            start = [(d, (d % modulus, 1)) for d in range(1, 10)]
            todo, seen = [st for _, st in start], set()
            while todo:
                r, n = st = todo.pop()
                if st in seen:
                    continue
                seen.add(st)
                by_next: dict[tuple, list[str]] = {}
                for d in range(10):
                    by_next.setdefault(((10 * r + d) % modulus, min(n + 1, k)), []).append(str(d))
                body = (['""'] if r in good and n >= k else []) + \
                    [f"[{''.join(ds)}] {rule}_{sign}_{t}_{c}" for (t, c), ds in by_next.items()]
                self.rules.append(f"{rule}_{sign}_{r}_{n} ::= " + " | ".join(f"({a})" for a in body))
                todo += list(by_next)
            lead = '"-" ' if sign == "neg" else ""
            alts += [f'{lead}"{d}" {rule}_{sign}_{r}_{n}' for d, (r, n) in start]
        self.rules.append(f"{rule} ::= " + " | ".join(f"({a})" for a in alts))
        return self.hole(rule)

    def object(self, spec: KeyClasses) -> dict:
        """Listed names in order (each once, required ones present), then any number of other keys, each
        in one class of keys (an automaton) with that class's value schema."""
        rule = f"typedlm_object_{_letters(len(self.holes))}"
        self.hole(rule)
        colon = f'{self.ws} ":" {self.ws}' if self.ws else '":"'
        sep = f'{self.ws} "," {self.ws}' if self.ws else '","'
        members = [(ebnf_literal(json.dumps(x.name, ensure_ascii=False)) + f" {colon} defs_{self.define(x.value)}",
                    x.required) for x in spec.listed if x.value is not None]
        others = []
        for i, (keys, value) in enumerate((x.keys, x.value) for x in spec.others):
            key = f"{rule}_key{_letters(i)}"
            states = {s: f"{key}_{j}" for j, s in enumerate(dict.fromkeys(
                [keys["initial"]] + [e[0] for e in keys["edges"]] + [e[2] for e in keys["edges"]] + keys["finals"]))}
            for s, name in states.items():
                alts = (['""'] if s in keys["finals"] else []) + [f"{c} {states[n]}" for f, c, n in keys["edges"] if f == s]
                self.rules.append(f"{name} ::= " + " | ".join(f"({a})" for a in alts))
            others.append(f'"\\"" {states[keys["initial"]]} "\\"" {colon} defs_{self.define(value)}')
        n = len(members)
        for i in range(n + 1):
            for started in (0, 1):
                lead = f"{sep} " if started else ""
                if i < n:
                    member, req = members[i]
                    alts = [] if req else [f"{rule}_{i + 1}_{started}"]
                    alts.append(f"{lead}{member} {rule}_{i + 1}_1")
                else:
                    alts = ['""'] + ([f"{lead}({' | '.join(others)}) {rule}_{n}_1"] if others else [])
                self.rules.append(f"{rule}_{i}_{started} ::= " + " | ".join(f"({a})" for a in alts))
        self.rules.append(f'{rule} ::= "{{" {self.ws} {rule}_0_0 {self.ws} "}}"')
        return {"const": self.holes[rule]}

    def string(self, spec, quote: str = '"\\""') -> dict:
        """A string value: the pattern automaton times the length counter (:func:`.strings.product`);
        ``quote=""``: a number's text (:mod:`.numbers`)."""
        cls = loop_class(spec)
        if cls is not None:  # one class repeated: an EBNF repetition, one rule per (class, lengths)
            counted = (cls, spec["lo"], spec["hi"])
            rule = self.loops.setdefault(counted, f"typedlm_length_{_letters(len(self.loops))}")
            return self.hole(rule, f'{quote} ({cls}){{{spec["lo"]},{"" if spec["hi"] is None else spec["hi"]}}} {quote}')
        start, moves = product(spec)
        if start is None:
            raise GrammarCompileError("internal: an empty string language reached the grammar emitter")
        rule = f"typedlm_string_{_letters(len(self.holes))}"
        names = {st: f"{rule}_{i}" for i, st in enumerate(moves)}
        for st, (end, out) in moves.items():
            alts = (['""'] if end else []) + [f"{cls} {names[nx]}" for cls, nx in out]
            self.rules.append(f"{names[st]} ::= " + " | ".join(f"({a})" for a in alts))
        self.rules.append(f"{rule} ::= " + " ".join(x for x in (quote, names[start], quote) if x))
        return self.hole(rule)

    def contains(self, spec: Contains, lo: int, hi: int | None) -> dict:
        prefix = [{c.mask: self.define(c.schema) for c in pos} for pos in spec.prefix]
        tail = {c.mask: self.define(c.schema) for c in spec.tail}
        auto = contains_automaton(spec.bounds, lo, hi, [set(p) for p in prefix], set(tail))
        if auto is None:
            raise GrammarCompileError("internal: an empty contains array reached the grammar emitter")
        start, moves = auto
        rule = f"typedlm_contains_{_letters(len(self.holes))}"
        names = {st: f"{rule}_{i}" for i, st in enumerate(moves)}
        sep = f'{self.ws} "," {self.ws}' if self.ws else '","'
        for st, (end, out) in moves.items():
            _, n, started = st
            defs = prefix[n] if n < len(prefix) else tail
            alts = ['""'] if end else []
            for mask, nx in out:
                alts.append(" ".join(x for x in ((sep if started else ""), f"defs_{defs[mask]}", names[nx]) if x))
            self.rules.append(f"{names[st]} ::= " + " | ".join(f"({a})" for a in alts))
        self.rules.append(f'{rule} ::= "[" {self.ws} {names[start]} {self.ws} "]"'.replace("  ", " "))
        return self.hole(rule)


def to_ebnf(core: dict, *, any_whitespace: bool, max_whitespace: int | None, strict: bool) -> str:
    """EBNF for a core form that needs one (see :func:`.ir.needs_grammar`); root rule ``root``."""
    ws = f"[ \\n\\r\\t]{{0,{max_whitespace}}}" if any_whitespace else ""
    b = _Builder(ws)
    defs = core.get("$defs", {})
    root = b.define(with_keywords(core, drop=("$defs",)))
    for name, d in defs.items():  # the normalizer's recursive definitions, reached by "#/$defs/<name>"
        b.defs[name] = b.walk(d)
    doc = {"anyOf": [{"$ref": f"#/$defs/{n}"} for n in b.defs if n.startswith("typedlmdef")], "$defs": b.defs}
    text = str(xgr.Grammar.from_json_schema(
        json.dumps(doc, ensure_ascii=False), any_whitespace=any_whitespace, strict_mode=strict,
        separators=None if any_whitespace else (",", ":"), max_whitespace_cnt=max_whitespace))
    for rule, placeholder in b.holes.items():
        literal = json.dumps(json.dumps(placeholder))  # the string constant as xgrammar prints it
        if literal not in text:
            raise GrammarCompileError(f"internal: placeholder {literal} not found in xgrammar's EBNF")
        text = text.replace(literal, rule)
    for name in b.defs:
        if name.startswith("typedlmdef") and not re.search(rf"^defs_{name} ::=", text, re.M):
            raise GrammarCompileError(f"internal: rule defs_{name} not found in xgrammar's EBNF")
    text = re.sub(r"^root ::=.*$", f"root ::= defs_{root}", text, count=1, flags=re.M)
    return text + "\n" + "\n".join(b.rules) + "\n"
