"""Core form -> what xgrammar compiles: the JSON Schema itself, or EBNF where xgrammar's converter falls short.

The normalizer (:mod:`.rewrites`) emits a core-form schema that jsonschema reads with its usual meaning.
A few core nodes carry a private ``x-typedlm-*`` keyword (an annotation to jsonschema) holding what the
grammar needs and xgrammar's JSON Schema subset cannot say:

- ``x-typedlm-contains`` on an array: ``{"match": M, "other": N}``, the item schema split into items
  that match ``contains`` (``M = items ∧ contains``) and those that do not (``N = items ∧ ¬contains``).
  The array is a sequence of M and N items whose count of M items lies in
  ``[minContains, maxContains]`` and whose length lies in ``[minItems, maxItems]``: a finite counter
  automaton (:func:`contains_automaton`), written as one EBNF rule per state.

When no node carries one, the schema goes to ``compile_json_schema`` as before. Otherwise each such node
is replaced by a placeholder string constant and its sub-schemas are moved to ``$defs``; xgrammar
converts that document to EBNF (rule ``defs_<name>`` per definition), and each placeholder literal is
replaced by a rule of ours built from those definition rules.
"""

from __future__ import annotations

import json
import re

from ...errors import GrammarCompileError

PRIVATE = ("x-typedlm-contains", "x-typedlm-fraction")
# A non-integral number: below 1e9 in magnitude, 1 to 6 decimals, the last one not 0. At most 15
# digits in all, so that a double (how jsonschema, Python and JavaScript read JSON numbers) holds it
# exactly enough to be non-integral too ("1.00000000000000001" reads as 1.0).
FRACTION = '("-" | "") ("0" | [1-9] [0-9]{0,8}) "." [0-9]{0,5} [1-9]'
MAX_STATES = 4096  # counter automaton states (count × length) before the keyword is refused
_HOLE = "typedlm-hole-"


def needs_grammar(core) -> str | None:
    """The first private keyword in ``core`` (the core form needs EBNF), or None."""
    if isinstance(core, dict):
        for k in PRIVATE:
            if k in core:
                return k
        return next((k for k in map(needs_grammar, core.values()) if k), None)
    if isinstance(core, list):
        return next((k for k in map(needs_grammar, core) if k), None)
    return None


def contains_automaton(mn: int, mx: int | None, lo: int, hi: int | None, match: bool, other: bool):
    """States ``(count, length, started)`` of an array read item by item, and for each live state its
    moves: ``(end_ok, [(kind, next_state)])`` with kind ``"match"``/``"other"``. Counts above the
    largest bound that matters are merged. None when no array satisfies the bounds. Refused (ValueError)
    past :data:`MAX_STATES`."""
    cap_c = mx if mx is not None else mn
    cap_l = hi if hi is not None else lo
    if (cap_c + 1) * (cap_l + 1) * 2 > MAX_STATES:
        raise ValueError(f"contains needs more than {MAX_STATES} counter states")
    moves = {}
    for c in range(cap_c + 1):
        for n in range(cap_l + 1):
            for s in (False, True):
                out = []
                if hi is None or n < hi:
                    n2 = n + 1 if hi is not None else min(n + 1, lo)
                    if match and (mx is None or c < mx):
                        out.append(("match", (c + 1 if mx is not None else min(c + 1, mn), n2, True)))
                    if other:
                        out.append(("other", (c, n2, True)))
                moves[(c, n, s)] = (c >= mn and n >= lo, out)
    live = {st for st, (end, _) in moves.items() if end}
    grew = True
    while grew:
        grew = False
        for st, (_, out) in moves.items():
            if st not in live and any(nx in live for _, nx in out):
                live.add(st)
                grew = True
    start = (0, 0, False)
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
        self.defs: dict[str, object] = {}
        self.rules: list[str] = []
        self.holes: dict[str, str] = {}  # rule name -> its placeholder string

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
        if "x-typedlm-contains" in node:
            return self.contains(node)
        if "x-typedlm-fraction" in node:
            return self.hole("typedlm_fraction", FRACTION)
        return {k: (v if k in ("enum", "const") else self.walk(v)) for k, v in node.items()}

    def hole(self, rule: str, body: str | None = None) -> dict:
        """A placeholder constant that stands for ``rule`` (defined here from ``body`` the first time)."""
        if rule not in self.holes:
            self.holes[rule] = _HOLE + _letters(len(self.holes))
            if body is not None:
                self.rules.append(f"{rule} ::= {body}")
        return {"const": self.holes[rule]}

    def contains(self, node) -> dict:
        split = node["x-typedlm-contains"]
        parts = {k: self.define(split[k]) for k in ("match", "other") if split[k] is not False}
        auto = contains_automaton(node.get("minContains", 1), node.get("maxContains"), node.get("minItems", 0),
                                  node.get("maxItems"), "match" in parts, "other" in parts)
        if auto is None:
            raise GrammarCompileError("internal: an empty contains array reached the grammar emitter")
        start, moves = auto
        rule = f"typedlm_contains_{_letters(len(self.holes))}"
        names = {st: f"{rule}_{i}" for i, st in enumerate(moves)}
        sep = f'{self.ws} "," {self.ws}'.strip() if self.ws else '","'
        for st, (end, out) in moves.items():
            alts = ['""'] if end else []
            for kind, nx in out:
                alts.append(" ".join(x for x in ((sep if st[2] else ""), f"defs_{parts[kind]}", names[nx]) if x))
            self.rules.append(f"{names[st]} ::= " + " | ".join(f"({a})" for a in alts))
        self.rules.append(f'{rule} ::= "[" {self.ws} {names[start]} {self.ws} "]"'.replace("  ", " "))
        return self.hole(rule)


def to_ebnf(core: dict, *, any_whitespace: bool, max_whitespace: int | None, strict: bool) -> str:
    """EBNF for a core form that needs one (see :func:`needs_grammar`); root rule ``root``."""
    import xgrammar as xgr

    ws = f"[ \\n\\r\\t]{{0,{max_whitespace}}}" if any_whitespace else ""
    b = _Builder(ws)
    core = dict(core)
    defs = core.pop("$defs", {})
    root = b.define(core)
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
