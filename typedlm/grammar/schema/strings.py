"""A string whose ``pattern`` (or format regex) stands beside ``minLength``/``maxLength``: the product
of the pattern's automaton (:mod:`.keys`, JSON escapes kept) and a length counter, exact. Lengths alone
(or a pattern whose automaton is one class looping) with a count: that class's raw characters repeated
``{lo,hi}`` in EBNF, **no JSON escape** — stricter, sound, as xgrammar's own ``minLength``/``maxLength`` string. Measured
(``bench gen`` schema, Qwen2.5 vocabulary, CPU): a repetition whose item also admits the escapes costs
xgrammar ~9 ms a mask (no cached mask: 5x slower decode at b1, 19x at b32 on the H200), the plain class
0.03 ms; the per-length product with escapes is fast to match but ~10 ms of compile per length. llguidance
(``automata=False``) reads ``minLength``/``maxLength`` itself and counts an escape as one character.

The product has one grammar rule per live ``(state, length)``; xgrammar's compile time grows with the
rule count (measured: ``format: uri`` (179 states) with ``maxLength: 50``, ~9,000 rules, 3.8 s on
one core), so past :data:`MAX_STATES` the length keyword is refused (a non-strict request relaxes it:
:mod:`.weaken`). Pydantic's ``HttpUrl`` (``format: uri`` + ``maxLength: 2083``) is written
as :data:`.formats.BOUNDED_URI` instead, a stricter form within the lengths. :mod:`.ebnf` writes the product.
"""

from __future__ import annotations

from functools import lru_cache

from .keys import TooLarge as KeyTooLarge, anything, meet, pattern, spec as automaton_spec

MAX_STATES = 2048  # automaton states × counted lengths


class TooLarge(Exception):
    pass


@lru_cache(maxsize=256)
def _automaton(patterns: tuple[str, ...], excluded: tuple[str, ...], escape: bool = True) -> dict | None:
    f = pattern(patterns[0]) if patterns else anything()
    for rx in patterns[1:]:
        f = meet(f, pattern(rx))
    for rx in excluded:
        f = meet(f, pattern(rx).everythingbut())
    return automaton_spec(f, escape=escape)


def length_spec(patterns: tuple[str, ...], excluded: tuple[str, ...], lo: int, hi: int | None) -> dict | None:
    """``{"initial", "finals", "edges", "lo", "hi"}``: the automaton of the strings matching every one of
    ``patterns`` and none of ``excluded`` (whole-match regexes), with the length bounds the grammar
    counts; None when no string is left."""
    try:
        auto = _automaton(patterns, excluded)
    except KeyTooLarge as e:
        raise TooLarge(str(e)) from None
    if auto is None:
        return None
    if loop_class(auto) is not None:  # any string over one class: counted by an EBNF repetition, no product
        if lo == 0 and hi is None:  # nothing counted: escapes kept (an uncounted loop matches fast)
            return {**auto, "lo": lo, "hi": hi}
        raw = _automaton(patterns, excluded, escape=False)  # its raw characters only (see the module doc)
        return {**(raw if raw is not None and loop_class(raw) is not None else auto), "lo": lo, "hi": hi}
    states = len({auto["initial"], *auto["finals"], *(e[0] for e in auto["edges"]), *(e[2] for e in auto["edges"])})
    counted = hi if hi is not None else lo  # the counter runs to maxLength, or to minLength and stops
    if states * (counted + 1) > MAX_STATES:
        kw = "maxLength" if hi is not None else "minLength"
        raise TooLarge(f"{kw} {counted} beside a pattern of {states} automaton states needs more than "
                       f"{MAX_STATES} grammar states")
    return {**auto, "lo": lo, "hi": hi}


def loop_class(auto: dict) -> str | None:
    """The EBNF class of an automaton that is one accepting state looping on it (every string of those
    characters, e.g. the lengths-only string: any character, JSON escapes included), else None."""
    edges = auto["edges"]
    if auto["finals"] == [auto["initial"]] and len(edges) == 1 and edges[0][0] == edges[0][2] == auto["initial"]:
        return edges[0][1]
    return None


def product(spec: dict):
    """The live states ``(state, length)`` of the product, from ``(initial, 0)``: ``{state: (may_end,
    [(EBNF class, next)])}``; the length counter stops at ``lo`` when there is no ``hi``."""
    lo, hi = spec["lo"], spec["hi"]
    finals = set(spec["finals"])
    out_edges: dict[str, list] = {}
    for s, cls, n in spec["edges"]:
        out_edges.setdefault(s, []).append((cls, n))

    def step(n: int) -> int | None:
        if hi is None:
            return min(n + 1, lo)
        return n + 1 if n < hi else None

    start = (spec["initial"], 0)
    moves, todo = {}, [start]
    while todo:
        st = todo.pop()
        if st in moves:
            continue
        s, n = st
        n2 = step(n)
        nxt = [] if n2 is None else [(cls, (t, n2)) for cls, t in out_edges.get(s, [])]
        moves[st] = (s in finals and n >= lo, nxt)
        todo += [t for _, t in nxt]
    live = live_states(moves)
    if start not in live:
        return None, {}
    return start, {st: (end, [(c, t) for c, t in nxt if t in live]) for st, (end, nxt) in moves.items() if st in live}


def live_states(moves: dict) -> set:
    """States of an automaton ``{state: (accepting, [(label, next state), ...])}`` from which an accepting
    state can be reached (the rest are dead ends a grammar must not enter)."""
    live = {st for st, (end, _) in moves.items() if end}
    grew = True
    while grew:
        grew = False
        for st, (_, nxt) in moves.items():
            if st not in live and any(t in live for _, t in nxt):
                live.add(st)
                grew = True
    return live
