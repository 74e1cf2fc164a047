"""Differential pattern fuzz: every engine (xgrammar, llguidance, auto) against jsonschema on generated
``pattern`` schemas and strings. Patterns are built from the pieces engines get wrong: classes (negated or
not) holding ``"``, ``\\``, control characters, whole control ranges, non-ASCII ranges, class escapes.
A grammar may refuse a pattern (a named error) or be stricter, never accept a string jsonschema rejects.

The reference is jsonschema (Draft 2020-12) with ``pattern`` searched as ECMA-262 does over this alphabet:
``re.ASCII`` (ECMA's ``\\d \\w`` are ASCII; its ``\\s`` agrees with ASCII's on these characters) and
``$`` as the end of the string (Python's ``$`` also matches before a final newline)."""

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typedlm.errors import GrammarCompileError
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.spec import make_constraint

ENGINES = ("xgrammar", "llguidance", "auto")
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# (pattern text, the same for Python's re) pieces
CLASS_ITEMS = ["a", "a-z", '"', "\\\\", "\\x00-\\x1f", "\\x00-\\x21", "\\x01-\\x1f", "\\n", "\\t", " -~", "/",
               "\\u00e0-\\u00ff", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "\\x00", "0-9"]
ATOMS = ["a", "b", '"', "\\\\", "\\n", "\\x00", "\u00e9", "/", ".", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S"]
QUANTIFIERS = ["", "", "+", "*", "?", "{1,2}"]
ALPHABET = ["a", "b", "z", '"', "\\", "\n", "\t", "\x00", "\x1f", "\u00e9", "/", " ", "0", "_"]


def _class(negated: bool, items: list[str]) -> str:
    return "[" + ("^" if negated else "") + "".join(items) + "]"


ATOM = st.one_of(st.sampled_from(ATOMS),
                 st.builds(_class, st.booleans(), st.lists(st.sampled_from(CLASS_ITEMS), min_size=1, max_size=3)))
PIECE = st.tuples(ATOM, st.sampled_from(QUANTIFIERS)).map("".join)
PATTERN = st.tuples(st.booleans(), st.lists(PIECE, min_size=1, max_size=3), st.booleans())
STRINGS = st.lists(st.lists(st.sampled_from(ALPHABET), max_size=5).map("".join), min_size=6, max_size=6)


def _ecma_pattern(validator, pattern, instance, schema):
    """``pattern`` as ECMA-262 searches, over this test's alphabet (module docstring)."""
    if isinstance(instance, str) and not re.search(pattern.replace("$", "\\Z"), instance, re.ASCII):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


REFERENCE = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _ecma_pattern})


@pytest.fixture(scope="module")
def engines(tiny):
    return {e: Grammars(tiny.grammars.tokenizer_info, engine=e, timeout_s=10.0) for e in ENGINES}


def _check(engines, pattern: str, strings: list[str]) -> None:
    schema = {"type": "string", "pattern": pattern}
    reference = REFERENCE(schema)
    for engine, grammars in engines.items():
        try:
            compiled = grammars.compile(make_constraint(json_schema=schema, any_whitespace=False))[0]
        except GrammarCompileError:
            continue  # refused by name: sound
        for s in strings:
            text = json.dumps(s, ensure_ascii=False)
            if accepts_text(compiled, text):
                assert reference.is_valid(s), f"{engine} accepts {text} but pattern {pattern!r} forbids it"


@pytest.mark.parametrize("pattern,bad", [
    ("^[^\\\\]+$", "js\\sub"),  # no backslash: llguidance's quoting admitted the escape \\
    ('^[^"]+$', 'a"b'),
    ("^[\\x00-\\x1f]$", '"'),  # any class holding every control character admitted \" and \\
    ("^[^\\x00\\\\]$", "\\"),
    ("^[\\s\\S]$", "ab"),
])
def test_known_holes_stay_closed(engines, pattern, bad):
    assert not REFERENCE({"type": "string", "pattern": pattern}).is_valid(bad)
    _check(engines, pattern, [bad])


@SETTINGS
@given(pattern=PATTERN, strings=STRINGS)
def test_no_engine_accepts_what_a_generated_pattern_forbids(engines, pattern, strings):
    start, pieces, end = pattern
    _check(engines, ("^" if start else "") + "".join(pieces) + ("$" if end else ""), strings)
