"""Core-form regexes as llguidance reads them: ECMA-262 class escapes spelled out (Rust's are Unicode),
and the patterns its JSON-string quoting gets wrong declined by name.

llguidance matches a ``pattern`` against the *decoded* string by quoting the regex into one over JSON
text. Measured (llguidance 1.9.1): a character set holding every control character U+0000-U+001F is
quoted as if it also held ``"`` and ``\\``: ``{"type": "string", "pattern": "^[\\x00-\\x1f]$"}`` accepts
``"\\""``, and ``^[^\\\\]+$`` (no backslash) accepts ``"js\\\\sub"``. The sets are its own unions of the
pattern's single-character pieces (an alternation ``[\\x00-\\x0f]|[\\x10-\\x1f]`` is one set), so
:func:`check_json_quoting` declines a pattern where a piece holding a control character lacks ``"`` or
``\\`` and the pieces together hold every control character (a set that reaches every control then holds
such a piece, and is not quoted right); ``auto`` then takes xgrammar, which reads it exactly.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Iterator

CONTROLS = "".join(chr(c) for c in range(0x20))
_PROBE = CONTROLS + '"\\'
_ESCAPE_LEN = {"x": 4, "u": 6, "c": 3}

# ECMA-262's class escapes, spelled out: llguidance's regexes are Rust's, where \s, \d, \w are Unicode
_ECMA_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_CLASSES = {"s": _ECMA_SPACE, "d": "0-9", "w": "0-9A-Za-z_"}


class Declined(ValueError):
    """A regex llguidance would not read exactly (the message says why)."""


@functools.lru_cache(maxsize=4096)  # a schema repeats its patterns (and a corpus its schemas' patterns)
def ecma_classes(rx: str) -> str:
    """A core-form regex (ECMA-262 escapes) with ``\\s \\S \\d \\D \\w \\W`` as explicit classes (a
    negated one inside a class as a nested class: ``[x\\D]`` -> ``[x[^0-9]]``); :class:`Declined` for
    ECMA's empty classes ``[]`` / ``[^]``, which Rust reads as a ``]``."""
    out, i, in_class = [], 0, False
    while i < len(rx):
        c = rx[i]
        if c == "\\" and i + 1 < len(rx):
            e = rx[i + 1]
            if rx.startswith("[\\s\\S]", i - 1) and e == "s":
                out.append("\\s\\S")  # anything: the same in both dialects
                i += 4
                continue
            if e.lower() in _CLASSES:
                body = _CLASSES[e.lower()]  # negated inside a class: a nested class (Rust: a union)
                out.append(body if in_class and e.islower() else f"[{'^' if e.isupper() else ''}{body}]")
            else:
                out.append(rx[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if rx.startswith("[^]", i) or rx.startswith("[]", i):  # ECMA: anything / nothing; Rust: a ']'
                raise Declined(f"pattern {rx!r}: an empty class")
        out.append(c)
        i += 1
    return "".join(out)


def atoms(rx: str) -> Iterator[str]:
    """The single-character pieces of ECMA regex ``rx``: classes, escapes, ``.``, literal characters."""
    i = 0
    while i < len(rx):
        c = rx[i]
        if c == "\\":
            n = _ESCAPE_LEN.get(rx[i + 1: i + 2], 2)
            yield rx[i:i + n]
            i += n
        elif c == "[":
            j = i + 1 + (rx[i + 1: i + 2] == "^")
            j += rx[j: j + 1] == "]"  # a ']' first in a class: ECMA's empty class, declined by ecma_classes
            while j < len(rx) and rx[j] != "]":
                j += 2 if rx[j] == "\\" else 1
            yield rx[i:j + 1]
            i = j + 1
        elif rx.startswith("(?:", i):
            i += 3
        elif c == "{":  # a counted repetition
            i = rx.find("}", i) + 1 or len(rx)
        else:
            if c not in "()|*+?^$":
                yield c
            i += 1


@functools.lru_cache(maxsize=8192)  # pieces repeat: each literal character is one
def _members(atom: str) -> str:
    """The characters of :data:`_PROBE` that ``atom`` matches (ECMA over these characters: ``re.ASCII``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Python warns on '[' inside a class (ECMA: a literal)
        try:
            compiled = re.compile(atom, re.ASCII | re.DOTALL)
        except re.error as e:
            raise Declined(f"piece {atom!r} not understood: {e}") from None
    return "".join(ch for ch in _PROBE if compiled.fullmatch(ch))


@functools.lru_cache(maxsize=4096)
def check_json_quoting(rx: str) -> None:
    """:class:`Declined` where llguidance's JSON quoting would admit escapes ``rx`` forbids (module
    docstring)."""
    covered, short = set(), None
    for atom in atoms(rx):
        held = _members(atom)
        covered |= set(held) & set(CONTROLS)
        if short is None and set(held) & set(CONTROLS) and not ('"' in held and "\\" in held):
            short = atom
    if short is not None and covered >= set(CONTROLS):
        raise Declined(f"pattern {rx!r}: {short!r} holds a control character but not both '\"' and '\\' "
                       "while the pattern holds every control character (llguidance's JSON quoting then "
                       "admits \\\" and \\\\)")
