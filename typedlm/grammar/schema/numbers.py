"""A number between bounds as a regular language of its JSON text, exact up to double rounding.

xgrammar's own number range admits at most 6 decimals and no exponent (measured: SchemaStore's
``radiohound-v0`` example, ``exclusiveMinimum: 0`` beside a 17-decimal frequency, was rejected). Here
the range is written as an automaton over the text ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?`` (no exponent: a
documented stricter form, like :data:`.ebnf.FRACTION`; never looser), compared digit by digit
(one comparison automaton per bound, run in step).

Soundness against jsonschema, which compares Python values (``json.loads``: an int for an integer
text, else a double): each bound becomes an inclusive decimal ``M`` such that every text on the right
side of ``M`` (exactly) is on the right side of the bound as Python reads it — ``M`` is the shortest
``repr`` of the nearest double within the bound (an exclusive bound steps one double inward), or that
double's exact value where an integer lies between the ``repr`` and the bound. Rounding is monotone, so
a text ``t ≥ M`` reads as ``float(t) ≥ float(M)``, itself within the bound; an integer text compares
exactly.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

from functools import lru_cache

from .strings import live_states

DECIMALS = 20  # a bound finer than this (``exclusiveMinimum: 0``: 5e-324) is rounded inward to it


def _inward(value, exclusive: bool, side: str) -> Decimal:
    """The inclusive decimal ``M`` of bound ``(value, exclusive)`` on ``side`` ('lo' or 'hi')."""
    toward = math.inf if side == "lo" else -math.inf

    def inside(x) -> bool:
        if side == "lo":
            return x > value if exclusive else x >= value
        return x < value if exclusive else x <= value

    f = float(value)  # OverflowError for an int beyond a double: the caller keeps xgrammar's range
    while not inside(f):
        f = math.nextafter(f, toward)
    whole = math.ceil if side == "lo" else math.floor  # the first integer text past ``m``
    m = next(m for m in (Decimal(repr(f)), Decimal(f)) if float(m) == f and inside(whole(m)))  # Decimal(f) is f
    return m.quantize(Decimal(1).scaleb(-DECIMALS), rounding=ROUND_CEILING if side == "lo" else ROUND_FLOOR)


def _digits(m: Decimal) -> tuple[str, str]:
    """(integer digits, fraction digits without trailing zeros) of a decimal's magnitude."""
    whole, _, frac = format(abs(m), "f").partition(".")
    return whole.lstrip("0") or "0", frac.rstrip("0")


def _compare(state, ch: str, whole: str, frac: str):
    """One character of a magnitude compared with ``whole.frac``: states ``("i", digits read, sign of the
    comparison so far)`` in the integer part, ``("f", fraction digits matched, sign)`` after the point,
    where the sign of a prefix against the bound's digits decides once it is not 0."""
    phase, n, rel = state
    if ch == ".":
        return ("f", 0, _integer_sign(n, rel, whole))
    if phase == "i":
        if n >= len(whole):
            return ("i", len(whole) + 1, 1)
        return ("i", n + 1, rel or (ch > whole[n]) - (ch < whole[n]))
    if rel or n >= len(frac):
        return ("f", n, rel or (ch > "0"))  # past the bound's digits: any non-zero digit is greater
    return ("f", n + 1, (ch > frac[n]) - (ch < frac[n]))


def _integer_sign(n: int, rel: int, whole: str) -> int:
    return -1 if n < len(whole) else 1 if n > len(whole) else rel


def _final_sign(state, whole: str, frac: str) -> int:
    """The sign of (magnitude - bound) once the text ends in ``state``."""
    phase, n, rel = state
    if phase == "i":
        rel = _integer_sign(n, rel, whole)
        return rel if rel or not frac else -1
    return rel if rel or n >= len(frac) else -1  # a prefix of the bound's fraction: the rest is not all 0


def _within(neg: bool, sign: int, bound: Decimal, side: str) -> bool:
    """Whether a text of sign ``neg`` whose magnitude compares ``sign`` with ``|bound|`` lies on the inner
    side of inclusive ``bound`` ('lo': value ≥ bound, 'hi': value ≤ bound); ``-0`` is 0."""
    if side == "hi":
        return _within(not neg, sign, -bound, "lo")
    if bound >= 0:
        return sign >= 0 if not neg else bound == 0 and sign == 0
    return True if not neg else sign <= 0


_SYNTAX = {  # the JSON number text without exponent: state -> {character class: next}
    "start": {"-": "sign", "0": "zero", "1-9": "int"}, "sign": {"0": "zero", "1-9": "int"},
    "zero": {".": "point"}, "int": {"0-9": "int", ".": "point"}, "point": {"0-9": "frac"}, "frac": {"0-9": "frac"},
}
_ENDS = {"zero", "int", "frac"}
_CLASS = {"-": '"-"', ".": '"."', "0": '"0"', "1-9": "[1-9]", "0-9": "[0-9]"}


def _automaton(bounds: tuple) -> dict | None:
    """Explore (syntax state, minus sign, one comparison state per bound) from the start; edges on the
    classes of :data:`_SYNTAX`, split per digit only where a comparison needs it."""
    digits = [(_digits(m), m, side) for m, side in bounds]
    start = ("start", False, tuple(("i", 0, 0) for _ in digits))
    names, edges, finals, todo = {start: "0"}, [], [], [start]
    while todo:
        st = todo.pop()
        syn, neg, cmps = st
        if syn in _ENDS and all(_within(neg, _final_sign(c, *d[0]), d[1], d[2]) for c, d in zip(cmps, digits)):
            finals.append(names[st])
        for cls, nxt in _SYNTAX[syn].items():
            chars = "0123456789" if cls == "0-9" else "123456789" if cls == "1-9" else cls
            targets: dict = {}
            for ch in chars:
                moved = cmps if ch == "-" else tuple(_compare(c, ch, *d[0]) for c, d in zip(cmps, digits))
                targets.setdefault((nxt, neg or ch == "-", moved), []).append(ch)
            for target, chs in targets.items():
                if target not in names:
                    names[target] = str(len(names))
                    todo.append(target)
                label = _CLASS[cls] if len(chs) == len(chars) else "[" + "".join(chs) + "]"
                edges.append([names[st], label, names[target]])
    return {"initial": "0", "finals": sorted(finals), "edges": edges}


@lru_cache(maxsize=256)
def range_spec(lo: tuple | None, hi: tuple | None) -> dict | None:
    """The automaton (:func:`.keys.spec` shape, with ``lo``/``hi`` length 0/None for
    :func:`.strings.product`) of the number texts within bounds ``(value, exclusive)``; None when none
    is left. OverflowError for an integer bound beyond a double (the caller keeps xgrammar's range)."""
    with localcontext() as ctx:
        ctx.prec = 2000  # exact: a double's decimal has at most 767 significant digits
        bounds = tuple((_inward(b[0], b[1], side), side) for side, b in (("lo", lo), ("hi", hi)) if b is not None)
        auto = _automaton(bounds)
    live = live_states({s: (s in auto["finals"], [(c, n) for f, c, n in auto["edges"] if f == s])
                        for s in {e[0] for e in auto["edges"]} | set(auto["finals"])})
    if auto["initial"] not in live:
        return None
    edges = [e for e in auto["edges"] if e[0] in live and e[2] in live]
    return {**auto, "edges": edges, "lo": 0, "hi": None}
