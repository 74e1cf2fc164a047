"""What the grammar cannot enforce: the refusal record, the keyword vocabulary, the ``pattern`` rewrite.

xgrammar silently ignores many keywords (``not``, ``if``, ``dependentRequired``, ``contains``,
type-specific keywords without ``type``, ...). A grammar that ignores a keyword accepts instances the
schema forbids, so :mod:`.rewrites` either rewrites a keyword exactly into what xgrammar enforces or
raises :class:`Refuse`, which becomes ``GrammarCompileError(keyword=, pointer=)``. Which keywords
validate (and so must be enforced or refused) is decided per draft in :mod:`.drafts`; every other
keyword is an annotation and ignored, as validators do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


_LOOKAROUND = re.compile(r"\(\?[=!<]")
# escapes whose ECMA-262 meaning xgrammar shares: classes, controls, hex/unicode, escaped punctuation
_OK_ESCAPE = re.compile(r"\\(?:[dDwWsStnrfv]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[^A-Za-z0-9])")
# ECMA-262 '.' matches anything but a line terminator; xgrammar's '.' also matches U+2028/U+2029
ECMA_DOT = r"[^\n\r\u2028\u2029]"


def _scan(body: str) -> tuple[str, bool, bool] | None:
    """One pass over a regex: (body with '.' made ECMA-exact, has unescaped ^/$, has top-level '|').
    None when it uses an escape or construct whose meaning we cannot keep exactly."""
    out, i, depth, in_class, anchors, alt = [], 0, 0, False, False, False
    any_alt, ranges = False, False
    while i < len(body):
        ch = body[i]
        if ch == "\\":
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
                # measured: xgrammar 0.2.9 compiles "(ab+)?" as if it were "a?b*" (accepts "b");
                # "{0,1}" is the same quantifier and compiles right. A lazy "??" matches the same set.
                out.append("){0,1}")
                i += 3 if body.startswith("??", i + 1) else 2
                continue
        elif ch == "|":
            alt, any_alt = alt or depth == 0, True
        elif ch == "{":
            m = re.match(r"\{(\d+)(,(\d*))?\}", body[i:])
            ranges = ranges or bool(m and m.group(2) is not None and m.group(3) != m.group(1))
        elif ch in "^$":
            anchors = True
        elif ch == ".":
            out.append(ECMA_DOT)
            i += 1
            continue
        out.append(ch)
        i += 1
    if any_alt and ranges:
        # measured: xgrammar 0.2.9 compiles "^(a|b|a{1,2})$" so that it accepts "ba"
        return None
    return "".join(out), anchors, alt


def rewrite_pattern(p: str) -> str | None:
    """JSON Schema ``pattern`` searches (ECMA-262); xgrammar matches the whole string. Return the
    whole-match regex accepting exactly the strings that contain a match, or None when we cannot."""
    if not isinstance(p, str) or _LOOKAROUND.search(p):
        return None
    start = p.startswith("^")
    body = p[1:] if start else p
    end = body.endswith("$") and not body.endswith("\\$")
    body = body[:-1] if end else body
    scanned = _scan(body)
    if scanned is None:
        return None
    body, anchors, alt = scanned
    if anchors or (alt and (start or end)):
        return None  # an anchor inside, or one that binds to a single branch
    any_ = r"[\s\S]*"
    return ("" if start else any_) + f"({body})" + ("" if end else any_)
