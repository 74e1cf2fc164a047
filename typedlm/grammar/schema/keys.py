"""Languages of object keys as finite automata (interegular): patterns, names, ``propertyNames``.

An object with ``patternProperties``, ``propertyNames`` or names that need JSON escapes is emitted as
a grammar of our own (:mod:`.ebnf`): its unlisted keys fall into classes, one per set of patterns they
match, each class a regular language (intersections and complements of the patterns, minus the listed
names, within ``propertyNames``). interegular computes those; :func:`spec` writes one out as the
JSON-able automaton the grammar emitter turns into rules. Keys are written without JSON escapes: a
character that would need one (``"``, ``\\``, control characters) is left out of every class.
"""

from __future__ import annotations

from functools import lru_cache
import re

import interegular
from interegular.fsm import Alphabet, FSM

MAX_STATES = 400  # a key automaton larger than this is refused (grammar size, compile time)


class TooLarge(Exception):
    pass


def _escape(text: str) -> str:
    return "".join(c if (c.isalnum() and c.isascii()) or ord(c) >= 0x100 else f"\\x{ord(c):02x}" for c in text)


def _parse(regex: str):
    try:
        return interegular.parse_pattern(regex).to_fsm()
    except Exception as e:  # interegular.patterns.Unsupported and parse errors
        raise TooLarge(f"the regex {regex!r} cannot be analysed: {e}") from None


# ECMA-262 \s (WhiteSpace and LineTerminator); interegular's own \s is ASCII only
_ECMA_SPACE = "\\x09\\x0a\\x0b\\x0c\\x0d\\x20\\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


@lru_cache(maxsize=128)
def pattern(regex: str):
    """Whole-match regex (``refusal.rewrite_pattern`` output) -> automaton. interegular reads no
    ``\\uXXXX``: those become ``\\xHH`` or the character itself; ``\\s``/``\\S`` get ECMA-262's set
    (``\\d``, ``\\w`` are ASCII in both). Cached: a format's regex (``uri``: 825 states) takes seconds."""
    out, i, in_class = [], 0, False
    while i < len(regex):
        two = regex[i:i + 2]
        if regex[i] == "\\" and regex.startswith("u", i + 1) and re.fullmatch(r"[0-9a-fA-F]{4}", regex[i + 2:i + 6]):
            c = chr(int(regex[i + 2:i + 6], 16))
            out.append(f"\\x{ord(c):02x}" if ord(c) < 0x100 else c)
            i += 6
            continue
        if two == "\\s":
            out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
        elif two == "\\S" and not in_class:
            out.append(f"[^{_ECMA_SPACE}]")
        elif two == "\\S" and not regex.startswith("[\\s\\S]", i - 3):
            raise TooLarge(f"the regex {regex!r} cannot be analysed: \\S inside a character class")
        elif regex[i] == "\\":
            out.append(two)
        else:
            if in_class:
                in_class = regex[i] != "]"
            elif regex[i] == "[":
                in_class = not regex.startswith("[]", i) and not regex.startswith("[^]", i)
            out.append(regex[i])
            i += 1
            continue
        i += 2
    return _parse("".join(out))


def names(values):
    """The automaton of exactly these (one or more) strings."""
    out = None
    for v in values:
        f = _parse(_escape(v)) if v else _parse("")
        out = f if out is None else out | f
    return out


def meet(a, b):
    """``a & b`` (the strings both automata accept). interegular's own intersection crawls the product with
    a list search per transition (quadratic: 110 of 121 s in one MaskBench schema, ``Github_hard---o12278``);
    this is the same breadth-first crawl keyed by a dict, and it does not keep the dead states where one side
    has no transition (same language, fewer states)."""
    alphabet, new_to_old = Alphabet.union(a.alphabet, b.alphabet)
    to_a, to_b = new_to_old
    states, index, finals, mapping = [(a.initial, b.initial)], {(a.initial, b.initial): 0}, set(), {}
    for i, (sa, sb) in enumerate(states):  # the list grows while it is walked
        if sa in a.finals and sb in b.finals:
            finals.add(i)
        row = mapping[i] = {}
        ma, mb = a.map.get(sa, {}), b.map.get(sb, {})
        for t in alphabet.by_transition:
            ta, tb = to_a[t], to_b[t]
            if ta in ma and tb in mb:
                nxt = (ma[ta], mb[tb])
                j = index.get(nxt)
                if j is None:
                    j = index[nxt] = len(states)
                    states.append(nxt)
                row[t] = j
    return FSM(alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=mapping,
               __no_validation__=True)


def anything():
    return _parse(r"[\s\S]*")


def lengths(lo: int, hi: int | None):
    return _parse(r"[\s\S]{%d,%s}" % (lo, "" if hi is None else hi))


def check(f):
    f = f.reduce()
    if len(f.states) > MAX_STATES:
        raise TooLarge(f"a key language needs more than {MAX_STATES} automaton states")
    return f


_UNSAFE = frozenset('"\\' + "".join(chr(i) for i in range(0x20)))


def _cls(chars, negate: bool = False) -> str:
    """An EBNF character class of ``chars`` (or of every other character), as code-point ranges."""
    cps, parts = sorted(ord(c) for c in chars), []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        parts.append(f"\\U{cps[i]:08X}" + (f"-\\U{cps[j]:08X}" if j > i else ""))
        i = j + 1
    return ("[^" if negate else "[") + "".join(parts) + "]"


# JSON's short escapes; every other control character is written \u00XX
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(chars) -> list[str]:
    """EBNF literals writing each character of ``chars`` (all in :data:`_UNSAFE`) as its JSON escape."""
    out = []
    for c in sorted(chars):
        text = _SHORT.get(c, f"\\u{ord(c):04x}")
        out.append('"' + "".join(f"\\U{ord(x):08X}" for x in text) + '"')
    return out


def spec(f, escape: bool = False) -> dict | None:
    """``{"initial", "finals", "edges": [[state, EBNF character class(es), state]]}`` over JSON-safe
    characters, dead states dropped; None when the language (so restricted) is empty. ``escape``: the
    characters a JSON string cannot hold raw (``"``, ``\\``, controls) are kept, written as their JSON
    escapes (a string value's exact language; keys leave them out)."""
    f = check(f)
    other = interegular.fsm.anything_else
    explicit = {c for c in f.alphabet._symbol_mapping if c is not other}
    grouped: dict[tuple, set] = {}
    for s, moves in f.map.items():
        for sym, nxt in moves.items():
            grouped.setdefault((s, nxt), set()).update(f.alphabet.by_transition[sym])
    edges = []
    for (s, nxt), chars in grouped.items():
        alts = []
        safe = {c for c in chars if c is not other and c not in _UNSAFE}
        if safe:
            alts.append(_cls(safe))
        if other in chars:
            alts.append(_cls(explicit | _UNSAFE, negate=True))
        if escape:
            alts += _escaped({c for c in chars if c in _UNSAFE} | (_UNSAFE - explicit if other in chars else set()))
        if alts:
            edges.append((s, alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")", nxt))
    live = set(f.finals)
    grew = True
    while grew:
        grew = False
        for s, _, n in edges:
            if n in live and s not in live:
                live.add(s)
                grew = True
    if f.initial not in live:
        return None
    return {"initial": str(f.initial), "finals": sorted(str(s) for s in f.finals if s in live),
            "edges": [[str(s), c, str(n)] for s, c, n in edges if s in live and n in live]}
