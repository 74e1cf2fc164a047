"""A number between bounds as a regular language of its JSON text, exact up to double rounding.

xgrammar's own number range admits at most 6 decimals and no exponent (measured: SchemaStore's
``radiohound-v0`` example, ``exclusiveMinimum: 0`` beside a 17-decimal frequency, was rejected). Here
the range is written as an automaton over the text ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?`` (no exponent: a
documented stricter form, like :data:`.ebnf.FRACTION`; never looser), compared digit by digit.

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

import interegular

from .keys import TooLarge, check, spec as automaton_spec

FRAC = r"(\.[0-9]+)?"
DECIMALS = 40  # a bound finer than this (``exclusiveMinimum: 0``: 5e-324) is rounded inward to it


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
    """(integer digits, fraction digits without trailing zeros) of a non-negative decimal."""
    text = format(m, "f")
    whole, _, frac = text.partition(".")
    return whole.lstrip("0") or "0", frac.rstrip("0")


def _at_least(m: Decimal) -> str:
    """Regex of the non-negative texts (no sign) whose value is ≥ ``m`` (≥ 0)."""
    whole, frac = _digits(m)
    k = len(whole)

    def fraction(j: int) -> str:
        if j == len(frac):
            return "[0-9]*"
        more = f"[{int(frac[j]) + 1}-9][0-9]*|" if frac[j] != "9" else ""
        return f"({more}{frac[j]}{fraction(j + 1)})"

    def integer(i: int) -> str:
        if i == k:
            return FRAC if not frac else r"\." + fraction(0)
        more = f"[{int(whole[i]) + 1}-9][0-9]{{{k - i - 1}}}{FRAC}|" if whole[i] != "9" else ""
        return f"({more}{whole[i]}{integer(i + 1)})"

    return f"([1-9][0-9]{{{k},}}{FRAC}|{integer(0)})"


def _at_most(m: Decimal) -> str:
    """Regex of the non-negative texts (no sign) whose value is ≤ ``m`` (≥ 0)."""
    whole, frac = _digits(m)
    k = len(whole)

    def fraction(j: int) -> str:
        if j == len(frac):
            return "0*"
        less = f"[0-{int(frac[j]) - 1}][0-9]*|" if frac[j] != "0" else ""
        stop = "|" if j > 0 else ""  # a shorter fraction: the rest of ``frac`` is not all zeros
        return f"({less}{frac[j]}{fraction(j + 1)}{stop})"

    def integer(i: int) -> str:
        if i == k:
            return r"(\.0+)?" if not frac else rf"(\.{fraction(0)})?"
        first = 1 if i == 0 and k > 1 else 0
        less = f"[{first}-{int(whole[i]) - 1}][0-9]{{{k - i - 1}}}{FRAC}|" if int(whole[i]) > first else ""
        return f"({less}{whole[i]}{integer(i + 1)})"

    shorter = f"(0|[1-9][0-9]{{0,{k - 2}}}){FRAC}|" if k >= 2 else ""
    return f"({shorter}{integer(0)})"


ANY = rf"(0|[1-9][0-9]*){FRAC}"


def _lower(m: Decimal) -> str:
    return _at_least(m) if m > 0 else f"({ANY}|-{_at_most(-m)})"


def _upper(m: Decimal) -> str:
    return f"({_at_most(m)}|-{ANY})" if m >= 0 else f"-{_at_least(-m)}"


def range_spec(lo: tuple | None, hi: tuple | None) -> dict | None:
    """The automaton (:func:`.keys.spec` shape, with ``lo``/``hi`` length 0/None for
    :func:`.strings.product`) of the number texts within bounds ``(value, exclusive)``; None when none
    is left. TooLarge (or OverflowError) where the bounds are too fine or too large to write."""
    parts = []
    with localcontext() as ctx:
        ctx.prec = 2000  # exact: a double's decimal has at most 767 significant digits
        for side, b, write in (("lo", lo, _lower), ("hi", hi, _upper)):
            if b is not None:
                parts.append(interegular.parse_pattern(write(_inward(b[0], b[1], side))).to_fsm())
    f = parts[0] if len(parts) == 1 else parts[0] & parts[1]
    auto = automaton_spec(check(f))
    return None if auto is None else {**auto, "lo": 0, "hi": None}
