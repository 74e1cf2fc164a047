"""``format`` as an exact regular language, checked against jsonschema's format checker.

A format is *known* when any draft's jsonschema ``FORMAT_CHECKER`` decides it (its optional
dependencies are runtime dependencies: ``jsonschema[format-nongpl]``), and it is asserted under every
draft, including those that do not define it (``date`` or ``uuid`` in a draft-04 schema: the author
means a date); an unknown format (Pydantic's ``binary``, ``password``, ...) is an annotation, ignored
as the validator ignores it. A known format
is enforced by a whole-match regex (:data:`PATTERNS`), or by xgrammar's own format grammar
(:data:`XGRAMMAR`), or refused (``regex``: not regular).
``uri``/``uri-reference`` beside a large ``maxLength`` (Pydantic's ``HttpUrl``): :data:`BOUNDED_URI`.

Exactness (``tests/grammar/schema/test_formats.py``, hypothesis through the compiled grammar, generated strings and
near misses): ``date``, ``time``, ``date-time``, ``ipv4``, ``ipv6``, ``json-pointer``,
``relative-json-pointer``, ``uri``, ``uri-reference`` (rfc3986-validator's own regexes, converted),
``iri``, ``iri-reference`` (rfc3987-syntax's grammar, transcribed: it rejects ``http://[::1]/``, so
the URI grammar is no subset):
the grammar accepts a string iff the checker does, except the checker accepting a trailing newline
(Python's ``$``) on ``date-time``/``time``/``uri*`` and leading zeros in an IPv4 part inside an IPv6
literal of a ``uri*``, which the suite calls invalid.
``duration`` (RFC 3339 appendix A), ``email`` (an address email-validator accepts too), ``uuid``
(xgrammar's grammar), ``hostname`` (at most
4 labels of at most 62 characters; the checker allows 253 characters of 63-character labels, a
language whose exact grammar is far too large): every accepted string is accepted by the checker (and
the suite), but the checker also takes some the grammar does not (isoduration's fractions and signs,
an ``@`` anywhere, UUIDs with extra dashes, longer host names): stricter, never looser. So are
``idn-hostname`` (the ASCII lower-case host names), ``uri-template`` (simple expressions) and ``idn-email``
(xgrammar's email) (:data:`STRICTER`).

Every pattern is written with ``{0,1}`` instead of ``(...)?``: xgrammar 0.2.9 compiles
``(ab+)?`` as if ``a?b*`` (the duration pattern accepted ``P1Y2M3DT4H5M6``).
"""

from __future__ import annotations

import functools
import re

import jsonschema
import rfc3986_validator
from pydantic import UUID1, UUID3, UUID4, UUID5, UUID6, UUID7, UUID8, IPvAnyAddress, NameEmail, TypeAdapter

_YEAR = "([0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"  # Python's date: no year 0
_LEAP = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"  # minus 0000
_DATE = (f"({_YEAR}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
         f"|02-(0[1-9]|1[0-9]|2[0-8]))|{_LEAP}-02-29)")
# rfc3339-validator (what jsonschema's date-time and time use), after jsonschema upper-cases the text:
# no leap second, hours 00-23, offsets up to 23:59
_TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+){0,1}([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_D = "[0-9]+"
_DUR_TIME = f"T({_D}H({_D}M({_D}S){{0,1}}){{0,1}}|{_D}M({_D}S){{0,1}}|{_D}S)"
_DUR_DATE = f"({_D}D|{_D}M({_D}D){{0,1}}|{_D}Y({_D}M({_D}D){{0,1}}){{0,1}})({_DUR_TIME}){{0,1}}"
_POINTER = "(/([^~/]|~[01])*)*"
_H16 = "[0-9a-fA-F]{1,4}"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_V4 = f"({_OCTET}\\.){{3}}{_OCTET}"


def _ipv6() -> str:
    """RFC 4291 text forms: 8 groups, or a '::' with at most 7 groups around it, optionally ending
    in a dotted IPv4 address that stands for the last two groups."""
    alts = [f"({_H16}:){{7}}{_H16}", f"({_H16}:){{6}}{_V4}"]
    for a in range(8):
        left = "" if a == 0 else f"({_H16}:){{{a - 1}}}{_H16}"
        right = f"({_H16}(:{_H16}){{0,{6 - a}}}){{0,1}}" if a <= 6 else ""
        alts.append(f"{left}::{right}")
        if a <= 5:
            alts.append(f"{left}::({_H16}:){{0,{5 - a}}}{_V4}")
    return "(" + "|".join(alts) + ")"


def _from_verbose(rx: str) -> str:
    """A ``re.VERBOSE`` regex of rfc3986-validator (what jsonschema's uri checkers run) in xgrammar's
    syntax: comments and blanks dropped, ``{,n}`` -> ``{0,n}``, ``(...)?`` -> ``(...){0,1}``."""
    rx = re.sub(r"(?<!\\)#[^\n]*", "", rx)
    return re.sub(r"\s+", "", rx).replace("{,", "{0,").replace(")?", "){0,1}").replace("\\#", "#")


def _rfc3986(rx: str) -> str:
    """rfc3986-validator's regex with its IPv6 literal replaced by :func:`_ipv6` (the validator allows
    leading zeros in an embedded IPv4 part, which the suite and RFC 3986 call invalid)."""
    head, *rest = rx.split(rfc3986_validator.IPv6_RE)
    return _ipv6().join([_from_verbose(head)] + [_from_verbose(r) for r in rest])

_URI = _rfc3986(rfc3986_validator.URI_RE)
_UCS, _PRIVATE = "\\u00a0-\\ud7ff\\uf900-\\ufdcf\\ufdf0-\\uffef", "\\ue000-\\uf8ff"  # RFC 3987 (BMP)


def _rfc3987_syntax() -> tuple[str, str]:
    """``iri`` and ``iri-reference`` as rfc3987-syntax (what jsonschema's checkers run) defines them: its
    Lark grammar (``syntax_rfc3987.lark``) has no recursion, so it is transcribed rule by rule, exactly
    (its IPv6 literal too, which lacks most of RFC 4291's '::' forms: ``http://[::1]/`` is no IRI to it)."""
    ucs, private = _UCS, _PRIVATE
    unreserved, sub_delims = "-A-Za-z0-9._~", "!$&'()*+,;="
    pct = "%[0-9A-Fa-f][0-9A-Fa-f]"

    def chars(cls: str) -> str:  # a character of the class or a percent-encoded octet
        return f"([{cls}]|{pct})"

    ipchar = chars(f"{unreserved}{ucs}{sub_delims}:@")
    h16, octet = "[0-9A-Fa-f]{1,4}", "([0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])"
    ls32 = f"({h16}:{h16}|{octet}\\.{octet}\\.{octet}\\.{octet})"
    groups = [f"{h16}:" * 6 + ls32, "::" + f"{h16}:" * 5 + ls32]
    groups += [":".join([h16] * k) + "::" + f"{h16}:" * (5 - k) + ls32 for k in range(1, 6)]
    groups += [":".join([h16] * 7) + "::" + h16, ":".join([h16] * 7) + "::"]
    ip_literal = f"\\[(({'|'.join(groups)})|v[0-9A-Fa-f]+\\.[{unreserved}{sub_delims}:]+)\\]"
    authority = (f"({chars(unreserved + ucs + sub_delims + ':')}*@){{0,1}}"
                 f"({ip_literal}|{chars(unreserved + ucs + sub_delims)}*)(:[0-9]*){{0,1}}")
    segments = f"(/{ipchar}*)*"
    absolute = f"/({ipchar}+{segments}){{0,1}}"
    query, fragment = f"(\\?({ipchar}|[{private}/?])*){{0,1}}", f"(#({ipchar}|[/?])*){{0,1}}"
    iri = f"[A-Za-z][-A-Za-z0-9+.]*:(//{authority}{segments}|{absolute}|{ipchar}+{segments}|){query}{fragment}"
    noscheme = f"{chars(unreserved + ucs + sub_delims + '@')}+{segments}"
    relative = f"(//{authority}{segments}|{absolute}|{noscheme}|){query}{fragment}"
    return iri, f"({iri}|{relative})"


_IRI, _IRI_REFERENCE = _rfc3987_syntax()

# RFC 6570 templates, within what uri-template (the checker) parses: literal text of RFC 6570's characters
# (no space, '"', '<', '>', '\\', '^', '`', '|', braces; '%' only in an escape); an expression is an
# operator, then variables (letters, digits, '_', single inner dots), each with a prefix length 1-999 or
# an explode '*'. Stricter than both (no '%' in names, no ',' operator, lengths to 999), never looser.
_VAR = "[A-Za-z0-9_]+(\\.[A-Za-z0-9_]+)*(:[1-9][0-9]{0,2}|\\*){0,1}"
_TEMPLATE_LITERAL = f"([!#$&-;=?-\\[\\]_a-z~{_UCS}{_PRIVATE}]|%[0-9A-Fa-f][0-9A-Fa-f])"
_URI_TEMPLATE = f"({_TEMPLATE_LITERAL}|\\{{[+#./;?&]{{0,1}}{_VAR}(,{_VAR})*\\}})*"

# RFC 1123 host names as the checker (fqdn) reads them: labels of letters, digits and inner hyphens, at
# most 253 characters in all. Written with at most 4 labels of at most 62 characters (251 in all), so
# no length has to be counted; no "--" in a label's 3rd and 4th place (IDNA A-labels, which the suite
# checks further) and no trailing dot (the suite rejects it): stricter than the checker, never looser.
_AN, _AH = "[A-Za-z0-9]", "[-A-Za-z0-9]"
_LABEL = f"{_AN}({_AN}|{_AH}({_AN}({_AH}{{0,58}}{_AN}){{0,1}}|-{_AN}({_AH}{{0,57}}{_AN}){{0,1}})){{0,1}}"
_LOWER_LABEL = _LABEL.replace("A-Z", "")  # idna: an upper-case letter is not a valid code point

# ``email`` as an address that email-validator (Pydantic's ``EmailStr``, deliverability unchecked) accepts,
# not only the checker (an '@'): a dot-atom local part of RFC 5322's atext (at most 3 atoms of at most 15,
# 47 characters; email-validator takes 64), then 1-3 host labels (no '--' in a label's 3rd and 4th place)
# and a top-level domain of 2-3 letters (no reserved name is that short: .test, .local, .arpa, .onion are
# longer). Stricter than both (no quoted local part, no IP literal, no other TLD), never looser.
_LOCAL = "[A-Za-z0-9_!#$%&'*+/=?^`{|}~-]{1,15}"
_EMAIL = f"{_LOCAL}(\\.{_LOCAL}){{0,2}}@({_LABEL}\\.){{1,3}}[A-Za-z]{{2,3}}"

PATTERNS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[Tt]{_TIME}",
    "duration": f"P({_DUR_DATE}|{_DUR_TIME}|{_D}W)",  # RFC 3339 appendix A
    "ipv4": _V4,
    "ipv6": _ipv6(),
    "json-pointer": _POINTER,
    "relative-json-pointer": f"(0|[1-9][0-9]*)(#|{_POINTER})",
    "uri": _URI,
    "uri-reference": f"({_URI}|{_rfc3986(rfc3986_validator.RELATIVE_REF_RE)})",
    "hostname": f"({_LABEL}\\.){{0,3}}{_LABEL}",
    "idn-hostname": f"({_LOWER_LABEL}\\.){{0,3}}{_LOWER_LABEL}",  # a stricter subset: ASCII host names
    "iri": _IRI,
    "iri-reference": _IRI_REFERENCE,
    "uri-template": _URI_TEMPLATE,
    "email": _EMAIL,
}
# regexes: accepted => checker accepts
STRICTER = {"duration", "hostname", "idn-hostname", "uri-template", "email"}

# Pydantic's own format names (its strict-mode types), asserted as Pydantic means them: the checker is
# Pydantic's validator, the regex a subset of what it accepts (stricter, never looser). ``uuidN``: the RFC
# 4122 form with version N and the RFC variant (Python's UUID has a version only then; Pydantic also takes
# braces, no dashes, a 'urn:uuid:' prefix); ``ipvanyaddress``: ipv4 | ipv6; ``name-email``: 'Name <addr>'
# or a bare address, the address as ``email`` writes it.
_HEX = "[0-9a-fA-F]"
_ADDRESS = PATTERNS["email"]
PYDANTIC = {f"uuid{v}": f"{_HEX}{{8}}-{_HEX}{{4}}-{v}{_HEX}{{3}}-[89abAB]{_HEX}{{3}}-{_HEX}{{12}}" for v in (1, 3, 4, 5, 6, 7, 8)}
PYDANTIC["ipvanyaddress"] = f"({_V4}|{_ipv6()})"
PYDANTIC["name-email"] = f"([A-Za-z][A-Za-z .'-]{{0,62}}[A-Za-z] <{_ADDRESS}>|{_ADDRESS})"
PATTERNS.update(PYDANTIC)
STRICTER |= set(PYDANTIC)

# ``uri``/``uri-reference`` beside a ``maxLength`` of at least BOUNDED_URI_LENGTHS[1] (Pydantic's ``HttpUrl``:
# 2083): a stricter-but-sound form whose length bound holds by construction, as the product of the URI
# automaton with a counter of 2,084 lengths is far too large to compile. An http(s) URL: a host of at least
# two letters, digits, '-' and '.' (first a letter or digit, last a letter: never read as an IPv4 number),
# a port 1-9999, then path, query and fragment of RFC 3986's unencoded characters, at most 255 each.
# Measured on xgrammar 0.2.9: a range above 128 in a ``pattern`` is counted lazily (~10 ms to compile;
# the same form as EBNF takes 6 s), but misread when something follows it inside a group
# (``a([b]{0,240}c){0,1}`` accepts ``ab``), so every large range here ends its group or stands at top
# level. tests/grammar/schema/test_formats.py proves the form a subset of ``uri`` (automaton inclusion), its lengths,
# and fuzzes the compiled grammar against ``re``.
_PCHAR = "-A-Za-z0-9._~!$&'()*+,;=:@"
BOUNDED_URI = (f"https{{0,1}}://[A-Za-z0-9][-A-Za-z0-9.]{{0,240}}[A-Za-z](:[1-9][0-9]{{0,3}}){{0,1}}"
               f"(/[{_PCHAR}/]{{0,255}}){{0,1}}(\\?[{_PCHAR}/?]{{0,255}}){{0,1}}(#[{_PCHAR}/?]{{0,255}}){{0,1}}")
BOUNDED_URI_LENGTHS = (9, 1023)  # "http://ab"; "https://" + host 242 + ":9999" + 3 × 256
BOUNDED_URI_FORMATS = frozenset({"uri", "uri-reference"})
# the shortest and longest string of each format (None: unbounded); a minLength/maxLength that these
# already imply is dropped beside the format (tests/grammar/schema/test_formats.py checks every accepted string)
LENGTHS = {"date": (10, 10), "time": (9, None), "date-time": (20, None), "duration": (3, None),
           "ipv4": (7, 15), "ipv6": (2, 45), "uuid": (36, 36), "uri": (2, None), "email": (6, 240),
           "uri-reference": (0, None), "hostname": (1, 251), "idn-hostname": (1, 251)}
XGRAMMAR = {"uuid", "idn-email"}  # xgrammar's own format grammars: accepted => checker accepts
XGRAMMAR_NAME = {"idn-email": "email"}  # the checker decides idn-email as email (an '@'): xgrammar's email
NOT_EXACT = "is not checked exactly by the grammar"


def _every_drafts_checker() -> jsonschema.FormatChecker:
    """One format checker deciding every format any draft's jsonschema checker decides (draft 2020-12's
    definition where drafts differ)."""
    out = jsonschema.FormatChecker(formats=())
    for cls in (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator,
                jsonschema.Draft201909Validator, jsonschema.Draft202012Validator):
        out.checkers.update(cls.FORMAT_CHECKER.checkers)
    return out


def _pydantic_checker(name: str):
    """Pydantic's validator of format ``name`` as a format check (a non-string passes, as formats do). The
    validator is built on first use: ``name-email`` needs the optional ``email-validator`` package; without
    it that format is judged by its own (stricter, sound) regex."""
    types = {"uuid1": UUID1, "uuid3": UUID3, "uuid4": UUID4, "uuid5": UUID5, "uuid6": UUID6, "uuid7": UUID7,
             "uuid8": UUID8, "ipvanyaddress": IPvAnyAddress, "name-email": NameEmail}

    @functools.cache
    def validate():
        try:
            return TypeAdapter(types[name]).validate_python
        except ImportError:  # email-validator missing: the format's own regex decides
            return re.compile(PYDANTIC[name]).fullmatch

    return lambda s: not isinstance(s, str) or bool(validate()(s))


def _with_pydantic(checker: jsonschema.FormatChecker) -> jsonschema.FormatChecker:
    """``checker`` deciding Pydantic's format names too (:data:`PYDANTIC`) with Pydantic's own validators."""
    for name in PYDANTIC:
        checker.checks(name, raises=(ValueError, TypeError))(_pydantic_checker(name))
    return checker


# Formats are asserted under every draft: an author of a draft-04 schema who writes ``format: date``
# (which draft 4 does not define) means a date, so typedlm enforces it, and judges instances with it.
FORMAT_CHECKER = _with_pydantic(_every_drafts_checker())


def known(name: str) -> bool:
    """Whether ``name`` is a format typedlm asserts (any draft's checker decides it); else an annotation."""
    return name in FORMAT_CHECKER.checkers
