"""Formats as regular languages, through the real compiled grammar, against jsonschema's checker.

hypothesis draws a well-formed seed (or a generated date/time/address) and applies up to three edits
(replace, insert, delete) from the format's alphabet: near misses. For the exact formats the grammar
accepts a string iff the draft 2020-12 format checker does; for the others every accepted string is
accepted by the checker (stricter, never looser). See typedlm/grammar/schema/formats.py.
"""

import datetime
import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typedlm.grammar.schema import find_refusals, prepare_schema
from typedlm.grammar.schema.formats import FORMAT_CHECKER, LENGTHS, PATTERNS, PYDANTIC, STRICTER, XGRAMMAR
from typedlm.grammar.spec import make_constraint

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ALPHABET = {
    "date": "0123456789-", "time": "0123456789:.+-Zz", "date-time": "0123456789:.+-ZzTt",
    "duration": "PYMWDTHS0123456789.", "ipv4": "0123456789.", "ipv6": "0123456789abcdefABCDEF:.",
    "json-pointer": "/~01a", "relative-json-pointer": "/~01a#",
    "uuid": "0123456789abcdefABCDEF-", "email": "ab@.-_+", "hostname": "aZ09-._", "idn-hostname": "aZ09-._\u00e9", "idn-email": "ab@.-_+\u00e9", "uri": "ab:/?#[]@%._~-09", "uri-reference": "ab:/?#[]@%._~-09 ",
    "uri-template": "a{}+#./;?&,:*19_%= ",
    "iri": "ab:/?#[]@%._~-09\u00e9\ue000 ", "iri-reference": "ab:/?#[]@%._~-09\u00e9\ue000 ",
    **{f"uuid{v}": "0123456789abcdefABCDEF-{}" for v in (1, 3, 4, 5, 6, 7, 8)},
    "ipvanyaddress": "0123456789abcdefABCDEF:.", "name-email": "Ab <>@.-_+'",
}
SEEDS = {
    "date": st.one_of(st.dates().map(datetime.date.isoformat),
                      st.sampled_from(["2024-02-29", "2100-02-29", "2000-02-29", "0001-01-01", "1999-04-31"])),
    "time": st.one_of(st.times().map(lambda t: t.isoformat() + "Z"),
                      st.sampled_from(["23:59:59+23:59", "12:30:45.123-05:00", "08:00:00z"])),
    "date-time": st.one_of(st.datetimes().map(lambda d: d.isoformat() + "+01:00"),
                           st.sampled_from(["1985-04-12T23:20:50.52Z", "2000-01-01t00:00:00z"])),
    "duration": st.sampled_from(["P1D", "PT1H", "P1Y2M3DT4H5M6S", "P4W", "PT0S", "P1M", "PT1M2S"]),
    "ipv4": st.one_of(st.ip_addresses(v=4).map(str), st.sampled_from(["0.0.0.0", "255.255.255.255"])),
    "ipv6": st.one_of(st.ip_addresses(v=6).map(str), st.ip_addresses(v=6).map(lambda a: a.exploded),
                      st.sampled_from(["::", "::ffff:1.2.3.4", "1::2:3:4:5:6:7"])),
    "json-pointer": st.sampled_from(["", "/a~0/b", "/~1", "/0/a"]),
    "relative-json-pointer": st.sampled_from(["0", "1/a", "2#", "10/~0"]),
    "uuid": st.uuids().map(str),
    **{f"uuid{v}": st.uuids(version=v if v <= 5 else None).map(
        lambda u, v=v: str(u)[:14] + str(v) + str(u)[15:19] + "8" + str(u)[20:]) for v in (1, 3, 4, 5, 6, 7, 8)},
    "ipvanyaddress": st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str)),
    "name-email": st.sampled_from(["a@b.co", "Joe Bloggs <joe.bloggs@example.com>", "O'Neil <a+b@c.org>"]),
    "idn-hostname": st.sampled_from(["example.com", "a", "a-b.c-d.e9", "xn--bcher-kva.example"]),
    "idn-email": st.sampled_from(["a@b.co", "joe.bloggs@example.com", "\u00e9@b.co"]),
    "hostname": st.sampled_from(["example.com", "a", "xn--bcher-kva.example.", "a-b.c-d.e9", "1.2.3.4",
                                 "a" * 62 + ".b"]),
    "email": st.sampled_from(["a@b.co", "joe.bloggs@example.com", "a+b@c.org"]),
    "uri": st.sampled_from(["http://a.b/c?d#e", "urn:isbn:0451450523", "mailto:a@b.co", "ftp://x:1/y",
                            "http://[::1]:80/", "http://[v1.x]/", "http://[::ffff:1.2.3.4]/"]),
    "uri-reference": st.sampled_from(["http://a.b/c?d#e", "//x/y", "#f", "../a?b", "a:b", "", "/p%20q"]),
    "uri-template": st.sampled_from(["http://example.com/dictionary/{term:1}/{term}", "{+a,b:3,c*}", "x{#y}z",
                                     "/a/{.b}{/c*}{;d}{?e,f}{&g}", "no variables", ""]),
    "iri": st.sampled_from(["http://\u0192\u00f8\u00f8.\u00df/?\u2202=x#\u00fc", "urn:isbn:0451450523", "a:",
                            "http://[1:2:3:4:5:6:7:8]/", "http://[1::2:3:4:5:6:7]:8/", "http://[v1.x]/",
                            "http://u:p@[1:2:3:4:5:6:1.2.3.4]/", "x:?\ue000"]),
    "iri-reference": st.sampled_from(["http://a.b/c?d#e", "//x/\u00e9", "#f", "../a?b", "", "/p%20q",
                                      "//[1:2:3:4:5:6:7::]/", "@a/b"]),
}
EXACT = set(PATTERNS) - STRICTER
CHECKER_BUGS = {  # the checker accepts, the suite (and RFC 3339) does not: Python's '$' before a final '\n'
    "date-time": lambda s: s.endswith("\n"), "time": lambda s: s.endswith("\n"),
    "uri": lambda s: s.endswith("\n") or _zero_in_literal(s),
    "uri-reference": lambda s: s.endswith("\n") or _zero_in_literal(s),
    # jsonschema 4.26 rejects a digit after any '0' of the leading integer ('100/a'), not just a leading zero
    "relative-json-pointer": lambda s: re.match(r"[1-9][0-9]*0[0-9]", s) is not None,
}


def _zero_in_literal(s):
    """A leading zero in an IPv4 part of an IPv6 literal ('[::1.02.3.4]'): rfc3986-validator accepts
    it, the suite and RFC 3986 do not."""
    import re

    return any(re.search(r"(^|[.:])0[0-9]", part) for part in re.findall(r"\[([^\]]*)\]", s))


def _mutated(fmt):
    edit = st.tuples(st.sampled_from("rid"), st.integers(0, 40), st.sampled_from(ALPHABET[fmt]))

    def apply(seed, edits):
        s = list(seed)
        for op, i, c in edits:
            i = min(i, len(s))
            if op == "r" and s:
                s[min(i, len(s) - 1)] = c
            elif op == "i":
                s.insert(i, c)
            elif s:
                del s[min(i, len(s) - 1)]
        return "".join(s)

    return st.builds(apply, SEEDS[fmt], st.lists(edit, max_size=3))


@pytest.fixture(scope="module")
def grammars():
    from tests.support.grammar import default_grammars

    return default_grammars()


_COMPILED = {}


def _accepts(grammars, fmt, text):
    from tests.support.grammar import accepts

    if fmt not in _COMPILED:
        _COMPILED[fmt] = grammars.compile(make_constraint(json_schema={"type": "string", "format": fmt},
                                                          strict=False, any_whitespace=False))[0]
    return accepts(_COMPILED[fmt], json.dumps(text, ensure_ascii=False))


@pytest.mark.parametrize("fmt", sorted(EXACT | XGRAMMAR | STRICTER))
def test_format_grammar_agrees_with_the_checker(grammars, fmt):
    @SETTINGS
    @given(text=_mutated(fmt))
    def check(text):
        ok = (FORMAT_CHECKER if fmt in PYDANTIC else CHECKER).conforms(text, fmt)
        got = _accepts(grammars, fmt, text)
        checker_bug = CHECKER_BUGS.get(fmt, lambda s: False)(text)
        if got:
            assert ok or (checker_bug and fmt == "relative-json-pointer"), f"grammar accepts {text!r}, the {fmt} checker does not"
            lo, hi = LENGTHS.get(fmt, (0, None))
            assert lo <= len(text) and (hi is None or len(text) <= hi), (fmt, text)
        elif fmt in EXACT and not checker_bug:
            assert not ok, f"the {fmt} checker accepts {text!r}, the grammar does not"

    check()


def test_every_pattern_avoids_the_optional_group_quirk():
    for name, rx in PATTERNS.items():
        assert ")?" not in rx, name


@pytest.mark.parametrize("fmt,text,valid", [
    ("date", "2024-02-29", True), ("date", "2023-02-29", False), ("date", "0000-01-01", False),
    ("date", "2100-02-29", False), ("date", "2000-02-29", True),
    ("time", "23:59:59.5+05:30", True), ("time", "24:00:00Z", False), ("time", "12:00:00", False),
    ("date-time", "2024-02-29t23:59:59z", True), ("date-time", "2023-02-29T00:00:00Z", False),
    ("duration", "P1Y2M3DT4H5M6S", True), ("duration", "P1Y2M3DT4H5M6", False),  # the '(..)?' quirk
    ("ipv4", "192.168.0.1", True), ("ipv4", "09.0.0.0", False),  # xgrammar's own ipv4 accepted "09"
    ("uri", "htt0://a", True),  # xgrammar's own uri rejected digits in the scheme
    ("uri-reference", "../a?b#c", True), ("uri-reference", "a b", False),
    ("iri", "http://\u0192\u00f8\u00f8.\u00df\u00e5r/?\u2202\u00e9\u0153=\u03c0\u00eex#\u03c0\u00ee\u00fcx", True),
    ("iri", "http://[::1]/", False),  # rfc3987-syntax's IPv6 literal lacks most '::' forms
    ("uri-template", "http://example.com/dictionary/{term:1}/{term}", True),
    ("uri-template", "http://example.com/dictionary/{term:1}/{term", False),
    ("iri", "//x/y", False), ("iri-reference", "//x/y", True), ("iri-reference", "a\\b", False),
])
def test_format_examples(grammars, fmt, text, valid):
    assert CHECKER.conforms(text, fmt) == valid
    assert _accepts(grammars, fmt, text) == valid


def test_unknown_formats_are_annotations_and_undecidable_ones_are_refused():
    from typedlm.errors import GrammarCompileError

    assert prepare_schema({"type": "string", "format": "binary"}) == {"type": "string"}  # Pydantic's bytes
    with pytest.raises(GrammarCompileError, match="format 'regex' is not checked exactly"):
        prepare_schema({"type": "string", "format": "regex"})
    # a length the format implies is dropped; one it does not imply is refused
    assert prepare_schema({"type": "string", "format": "uri", "minLength": 1}) == \
        prepare_schema({"type": "string", "format": "uri"})
    with pytest.raises(GrammarCompileError, match="maxLength"):
        prepare_schema({"type": "string", "format": "uri", "maxLength": 200})  # the exact product: too large


def _length_range(fsm) -> tuple[int, int]:
    """The shortest and longest string an automaton accepts (AssertionError when it has a live cycle)."""
    live, grew = set(fsm.finals), True
    while grew:
        grew = False
        for state, moves in fsm.map.items():
            if state not in live and any(n in live for n in moves.values()):
                live.add(state)
                grew = True
    edges = {s: {n for n in fsm.map.get(s, {}).values() if n in live} for s in live}
    indegree = {s: 0 for s in live}
    for targets in edges.values():
        for n in targets:
            indegree[n] += 1
    depth = {fsm.initial: (0, 0)}  # state -> (shortest, longest) path from the start
    todo, seen = [s for s in live if indegree[s] == 0], 0
    while todo:
        state = todo.pop()
        seen += 1
        for n in edges[state]:
            if state in depth:
                lo, hi = depth[state]
                old = depth.get(n, (lo + 1, hi + 1))
                depth[n] = (min(old[0], lo + 1), max(old[1], hi + 1))
            indegree[n] -= 1
            if indegree[n] == 0:
                todo.append(n)
    assert seen == len(live), "the automaton has a cycle: no length bound"
    ends = [depth[s] for s in fsm.finals if s in depth]
    return min(lo for lo, _ in ends), max(hi for _, hi in ends)


def test_bounded_uri_is_a_uri_within_its_lengths(grammars):
    """Pydantic's HttpUrl (``format: uri``, ``maxLength: 2083``) compiles to BOUNDED_URI: every string it
    admits is a ``uri`` (automaton inclusion in the exact URI automaton) and at most 1,023 characters
    long, at least 8 (both reached); the grammar follows it."""
    from typedlm.grammar.schema.formats import BOUNDED_URI, BOUNDED_URI_LENGTHS
    from typedlm.grammar.schema.keys import pattern

    bounded = pattern(BOUNDED_URI)
    assert (bounded & pattern(PATTERNS["uri"]).everythingbut()).empty()  # and uri-reference: uri | relative
    assert _length_range(bounded) == BOUNDED_URI_LENGTHS
    http_url = {"type": "string", "format": "uri", "maxLength": 2083, "minLength": 1}
    core = {"type": "string", "pattern": BOUNDED_URI}
    assert prepare_schema(http_url) == core == prepare_schema({**http_url, "format": "uri-reference"})
    assert find_refusals({**http_url, "minLength": 10})[0].keyword == "maxLength"  # not implied: the product
    compiled = grammars.compile(make_constraint(json_schema=http_url, any_whitespace=False))[0]
    from tests.support.grammar import accepts

    longest = "https://" + "a" * 241 + "b:9999/" + "p" * 255 + "?" + "q" * 255 + "#" + "f" * 255
    for text in ("http://ab", "https://example.com/a/b?c=1&d=(2)#e", "http://a-b.c.de:8080/", longest):
        assert accepts(compiled, json.dumps(text)) and CHECKER.conforms(text, "uri"), text
    for text in ("ftp://ab", "http://a", "http://a1", "http://a.1", "http://1.2.3.4", "http://a:0", "https://a/" + "p" * 256, "http://a/%20",
                 "mailto:a@b.co", longest + "f"):
        assert not accepts(compiled, json.dumps(text)), text

    edit = st.tuples(st.sampled_from("rid"), st.integers(0, 300), st.sampled_from("a1-.:/?#@%_ "))
    seeds = st.one_of(st.from_regex(BOUNDED_URI, fullmatch=True), st.sampled_from(["http://ab/c?d#e", longest]))

    @SETTINGS
    @given(seed=seeds, edits=st.lists(edit, max_size=3))
    def check(seed, edits):  # xgrammar's reading of the regex (it misreads some ranges) against re's
        text = list(seed)
        for op, i, c in edits:
            i = min(i, len(text))
            if op == "i":
                text.insert(i, c)
            elif text:
                text[min(i, len(text) - 1):min(i, len(text) - 1) + 1] = [c] if op == "r" else []
        text = "".join(text)
        assert accepts(compiled, json.dumps(text)) == bool(re.fullmatch(BOUNDED_URI, text)), text

    check()


@pytest.mark.parametrize("draft,fmt,good,bad", [
    ("http://json-schema.org/draft-04/schema#", "date", "2020-02-29", "2021-02-29"),
    ("http://json-schema.org/draft-04/schema#", "uuid", "123e4567-e89b-12d3-a456-426614174000", "not-a-uuid"),
    ("http://json-schema.org/draft-06/schema#", "time", "10:00:00Z", "25:00:00Z"),
    ("http://json-schema.org/draft-07/schema#", "duration", "P1D", "1D"),
])
def test_formats_are_asserted_under_every_draft(grammars, draft, fmt, good, bad):
    """Draft 4 defines no ``date`` (nor 6 ``time``, 7 ``duration``): the author still means one, so the
    format is enforced there as under 2020-12, and enum values are judged with it too."""
    from tests.support.grammar import accepts
    from typedlm.grammar.spec import make_constraint

    schema = {"$schema": draft, "type": "string", "format": fmt}
    compiled, _ = grammars.compile(make_constraint(json_schema=schema, any_whitespace=False))
    assert accepts(compiled, json.dumps(good)) and not accepts(compiled, json.dumps(bad))
    assert prepare_schema({**schema, "enum": [good, bad]}) == {"enum": [good]}
    regex = {"$schema": draft, "type": "string", "format": "regex"}  # known, not enforceable: refused, not ignored
    assert find_refusals(regex)[0].keyword == "format"


def test_a_large_range_mid_group_is_not_left_to_xgrammar():
    """xgrammar 0.2.9 reads ``a([b]{0,500}c){0,1}`` as accepting ``ab``; our automaton is too large for it
    (over 400 states), so the pattern is refused rather than compiled loosely."""
    from typedlm.grammar.schema.refusal import xgrammar_safe
    from typedlm.grammar.schema.formats import BOUNDED_URI

    assert not xgrammar_safe("(a([b]{0,500}c){0,1})") and xgrammar_safe("(a(/[b]{0,500}){0,1})")
    assert xgrammar_safe("a[b]{0,500}c") and xgrammar_safe(BOUNDED_URI)
    assert find_refusals({"type": "string", "pattern": "^a([b]{0,500}c)?$"})[0].keyword == "pattern"


def test_meet_accepts_what_both_automata_accept():
    """``keys.meet`` (the normalizer's fast product) accepts exactly what interegular's own ``&`` accepts:
    every pair of a small pattern set, with and without a complement, on every string up to 5 letters."""
    import itertools

    from typedlm.grammar.schema.keys import meet, pattern

    pats = ["a[bc]*d", "[a-d]{2,4}", "(ab|cd)+", "[^b]*", ".*d", "x?[a-c]+"]
    words = ["".join(w) for n in range(6) for w in itertools.product("abcdx", repeat=n)]
    for p, q in itertools.product(pats, repeat=2):
        a = pattern(p)
        for b in (pattern(q), pattern(q).everythingbut()):
            fast, slow = meet(a, b), a & b
            assert [w for w in words if fast.accepts(w)] == [w for w in words if slow.accepts(w)], (p, q)
