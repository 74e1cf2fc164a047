"""What the grammar cannot enforce: the refusal record, the keyword vocabulary, the ``pattern`` rewrite.

xgrammar silently ignores many keywords (``not``, ``if``, ``dependentRequired``, ``contains``,
type-specific keywords without ``type``, ...). A grammar that ignores a keyword accepts instances the
schema forbids, so :mod:`.rewrites` either rewrites a keyword exactly into what xgrammar enforces or
raises :class:`Refuse`, which becomes ``GrammarCompileError(keyword=, pointer=)``. Which keywords
validate (and so must be enforced or refused) is decided per draft in :mod:`.drafts`; every other
keyword is an annotation and ignored, as validators do.
"""

from __future__ import annotations

from dataclasses import dataclass
import re

TYPES = ("null", "boolean", "number", "string", "array", "object")  # integer is a kind of number
JSON_TYPES = set(TYPES) | {"integer"}


@dataclass(frozen=True)
class Refusal:
    keyword: str
    pointer: str
    reason: str

    def message(self) -> str:
        return f"keyword '{self.keyword}' at '{self.pointer or '/'}' is not enforced: {self.reason}"


class Refuse(Exception):
    """Raised inside the normalizer; carries the :class:`Refusal`."""

    def __init__(self, keyword: str, pointer: str, reason: str):
        super().__init__(reason)
        self.refusal = Refusal(keyword, pointer, reason)


def ptr(parent: str, *parts) -> str:
    return parent + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


_LOOKAROUND = re.compile(r"\(\?<?[=!]")
# escapes whose ECMA-262 meaning xgrammar shares: classes, controls, hex/unicode, escaped punctuation
_OK_ESCAPE = re.compile(r"\\(?:[dDwWsStnrfv]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[^A-Za-z0-9])")
_NUL = re.compile(r"\\0(?![0-9])")  # ECMA \0: the NUL character
# ECMA-262 '.' matches anything but a line terminator; xgrammar's '.' also matches U+2028/U+2029
ECMA_DOT = r"[^\n\r\u2028\u2029]"
ANY = r"[\s\S]*"
_PROBLEMS = ((_LOOKAROUND, "lookaround is not a regular language"),
             (re.compile(r"\\[1-9]|\\k<"), "a backreference is not a regular language"),
             (re.compile(r"\\[bB]"), "a word boundary (\\b, \\B) is not enforced"),
             (re.compile(r"\\[pP]\{"), "Unicode property escapes (\\p{..}) are not enforced"),
             (re.compile(r"\(\?(?!:)"), "named groups and inline flags are not enforced"))


def _scan(body: str) -> tuple[str, bool, list[int]] | None:
    """One pass over a regex: (body with '.' made ECMA-exact and ``(..)?`` as ``(..){0,1}``, has an
    unescaped ^/$, the offsets of its top-level '|'). None when it uses an escape or construct whose
    meaning we cannot keep exactly."""
    out, i, depth, in_class, anchors, alts = [], 0, 0, False, False, []
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            m = _NUL.match(body, i)
            if m:
                out.append("\\x00")
                i = m.end()
                continue
            m = _OK_ESCAPE.match(body, i)
            if not m:
                return None
            out.append(m.group())
            i = m.end()
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            if body.startswith(("[]", "[^]"), i):
                return None  # ECMA: empty / any-char class; other engines read ']' as a literal
            in_class = True
        elif ch == "(":
            depth += 1
            if body.startswith("(?", i) and not body.startswith("(?:", i):
                return None  # lookaround, named group, inline flags
        elif ch == ")":
            depth -= 1
            if body.startswith("?", i + 1):
                # xgrammar 0.2.9 compiles "(ab+)?" as if it were "a?b*" (accepts "b");
                # "{0,1}" is the same quantifier and compiles right. A lazy "??" matches the same set.
                out.append("){0,1}")
                i += 3 if body.startswith("??", i + 1) else 2
                continue
        elif ch == "|" and depth == 0:
            alts.append(len(out))
        elif ch in "^$":
            anchors = True
        elif ch == ".":
            out.append(ECMA_DOT)
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out), anchors, alts


def _branch(body: str) -> str | None:
    """One top-level alternative of a pattern, searched: the whole-match regex of the strings that
    contain a match, its own ``^``/``$`` kept as anchors at its ends."""
    start = body.startswith("^")
    body = body[1:] if start else body
    end = body.endswith("$") and not body.endswith("\\$")
    body = body[:-1] if end else body
    scanned = _scan(body)
    if scanned is None or scanned[1] or scanned[2]:
        return None  # an anchor inside (not at a branch's ends)
    return ("" if start else ANY) + f"({scanned[0]})" + ("" if end else ANY)


def rewrite_pattern(p: str) -> str | None:
    """JSON Schema ``pattern`` searches (ECMA-262); xgrammar matches the whole string. Return the
    whole-match regex accepting exactly the strings that contain a match, or None when we cannot
    (:func:`pattern_problem` says why). A top-level alternation is searched branch by branch, each
    with its own anchors (``^a|b$``: starts with a, or ends with b)."""
    if not isinstance(p, str) or _LOOKAROUND.search(p):
        return None
    scanned = _scan(p)
    if scanned is None:
        return None
    if not scanned[2]:
        return _branch(p)
    # split the original text at its top-level '|' (the scan's offsets are into its output)
    parts, last = [], 0
    for i, ch, depth in _syntax(p):
        if ch == "|" and depth == 0:
            parts.append(p[last:i])
            last = i + 1
    parts.append(p[last:])
    branches = [_branch(x) for x in parts]
    if any(b is None for b in branches):
        return None
    return "|".join(f"({b})" for b in branches)


def pattern_problem(p) -> str:
    """Why :func:`rewrite_pattern` cannot keep ``p`` exactly, in words."""
    if not isinstance(p, str):
        return "pattern must be a string"
    for rx, why in _PROBLEMS:
        if rx.search(p):
            return why
    if re.search(r"(?<!\\)[\^$]", p):
        return "an anchor (^, $) inside a group or mid-pattern is not enforced"
    return "an escape or class whose ECMA-262 meaning is not kept"


def xgrammar_safe(rx: str) -> bool:
    """Whether xgrammar's own regex engine reads whole-match regex ``rx`` right. Measured: xgrammar
    0.2.9 compiles "^(a|b|a{1,2})$" so that it accepts "ba" (an alternation beside a range), and
    "a([b]{0,500}c){0,1}" so that it accepts "ab" (a range above 128 followed by more in its group)."""
    ranges = any(m.group(2) is not None and m.group(3) != m.group(1)
                 for m in re.finditer(r"\{(\d+)(,(\d*))?\}", rx))
    return not (ranges and "|" in rx) and not _large_range_mid_group(rx)


def _large_range_mid_group(rx: str) -> bool:
    """A ``{m,n}`` counting past 128 inside a group with more after it in that group."""
    depth, i, in_class = 0, 0, False
    while i < len(rx):
        c = rx[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c in "()":
            depth += 1 if c == "(" else -1
        elif c == "{":
            m = re.match(r"\{(\d+)(?:,(\d*))?\}", rx[i:])
            if m and max(int(m.group(1)), int(m.group(2) or 0)) > 128 and depth > 0 \
                    and not rx.startswith(")", i + m.end()):
                return True
        i += 1
    return False


def _syntax(p: str, start: int = 0, depth: int = 0):
    """Each character of ``p`` from ``start`` outside escapes and character classes, as (index, character, group
    depth after it; ``depth``: the depth at ``start``)."""
    in_class, i = False, start
    while i < len(p):
        ch = p[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        else:
            depth += (ch == "(") - (ch == ")")
            yield i, ch, depth
        i += 1


def lookahead_split(p) -> tuple[str, str] | None:
    """A name pattern ``^(?!X)Y`` (a leading negative lookahead, as in ``^(?!x-)``, ``^(?!(a|b)$)``) as
    two whole-match regexes: (the names it excludes: those that start with X, or are X where X ends in
    ``$``; the names ``^Y`` matches). None for any other form, or where X or Y has no exact rewrite
    (:func:`rewrite_pattern`), or Y a top-level ``|`` (the lookahead would bind to its first branch only)."""
    if not isinstance(p, str) or not p.startswith("^(?!"):
        return None
    i = next((j + 1 for j, _, depth in _syntax(p, 4, 1) if depth == 0), None)  # past the lookahead's ')'
    if i is None:
        return None
    head, rest = p[4:i - 1], p[i:]
    whole = head.endswith("$") and not head.endswith("\\$")
    excluded = rewrite_pattern(f"^(?:{head[:-1] if whole else head})" + ("$" if whole else ""))
    scanned = _scan(rest)
    if excluded is None or scanned is None or scanned[2] or _LOOKAROUND.search(rest):
        return None
    matched = rewrite_pattern("^" + rest)
    return None if matched is None else (excluded, matched)


def key_regex(p) -> str | None:
    """The whole-match regex of the names a ``patternProperties`` pattern matches: :func:`rewrite_pattern`'s,
    or for ``^(?!X)Y`` (:func:`lookahead_split`) one with the lookahead kept (``(?!..\\Z)``: read by
    jsonschema's probes only; the grammar gets the automaton, llguidance refuses it); None: refused."""
    out = rewrite_pattern(p)
    if out is not None:
        return out
    split = lookahead_split(p)
    return None if split is None else f"(?!(?:{split[0]})\\Z)(?:{split[1]})"
