"""A ``patternProperties`` name pattern with a leading negative lookahead, ``^(?!X)Y`` (``^(?!x-)``, keys
that are not ``$``-keywords, ``^(?!(a|b)$)``): exact as the names ``^Y`` matches minus those X excludes
(an automaton complement, ``refusal.lookahead_split``), checked against jsonschema on random objects through
the compiled grammar; a lookahead anywhere else stays refused by name; llguidance (no lookaround) leaves
it to xgrammar under ``auto``."""

import json

import hypothesis.strategies as st
import jsonschema
import pytest
import xgrammar as xgr
from hypothesis import given, settings

from typedlm.errors import GrammarCompileError
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.llg import NotForLLGuidance
from typedlm.grammar.schema import prepare_schema
from typedlm.grammar.spec import make_constraint

SCHEMAS = [
    {"type": "object", "patternProperties": {"^(?!x-)[a-z-]+$": {"type": "integer"}}, "additionalProperties": False},
    {"type": "object", "properties": {"$id": {"type": "string"}},
     "patternProperties": {"^(?!\\$)": {"type": "integer"}}},
    {"type": "object", "patternProperties": {"^(?!(foo|bar)$)": {"type": "string"}, "^f": {"type": "integer"}}},
    {"type": "object", "patternProperties": {"^(?!a)": {"type": "integer"}}, "additionalProperties": {"type": "string"},
     "required": ["ab"]},
    {"type": "array", "items": {"type": "object", "patternProperties": {"^(?!x-)x": {"const": 1}},
                                "additionalProperties": False}},
]
KEYS = st.text(st.sampled_from(["x", "-", "a", "b", "f", "o", "$", "r"]), max_size=5)
VALUES = st.one_of(st.integers(0, 2), st.sampled_from(["s", ""]))
OBJECTS = st.dictionaries(KEYS, VALUES, max_size=4)


@pytest.fixture(scope="module")
def engines(tiny):
    return {e: Grammars(tiny.grammars.tokenizer_info, engine=e) for e in ("xgrammar", "auto", "llguidance")}


def _text(schema, value) -> str:
    """The JSON text the grammar writes: listed properties first, in the schema's order."""
    if isinstance(value, list):
        return "[" + ",".join(_text(schema["items"], v) for v in value) + "]"
    listed = [k for k in schema.get("properties", {}) if k in value]
    return json.dumps({k: value[k] for k in listed + [k for k in value if k not in listed]}, separators=(",", ":"))


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=120, deadline=None, derandomize=True)
@given(value=st.one_of(OBJECTS, st.lists(OBJECTS, max_size=2)))
def test_a_leading_lookahead_in_a_name_pattern_is_exact(engines, schema, value):
    if (schema["type"] == "array") != isinstance(value, list):
        return
    compiled = engines["xgrammar"].compile(make_constraint(json_schema=schema, any_whitespace=False))[0]
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    assert accepts_text(compiled, _text(schema, value)) is expected, (schema, value)


@pytest.mark.parametrize("pattern", ["a(?!x)", "^a(?!x)", "^(?=a)", "^(?!a(?!b))", "^(?!a)b|c", "(?!a)"])
def test_a_lookahead_anywhere_else_is_refused_by_name(pattern):
    with pytest.raises(GrammarCompileError, match="lookaround") as e:
        prepare_schema({"type": "object", "patternProperties": {pattern: {"type": "integer"}}})
    assert e.value.keyword == "patternProperties"


def test_llguidance_leaves_a_lookahead_to_xgrammar(engines):
    schema = SCHEMAS[0]
    with pytest.raises(NotForLLGuidance, match="lookahead"):
        engines["llguidance"].compile(make_constraint(json_schema=schema, any_whitespace=False))
    compiled = engines["auto"].compile(make_constraint(json_schema=schema, any_whitespace=False))[0]
    assert isinstance(compiled, xgr.CompiledGrammar)
    assert accepts_text(compiled, '{"ab":1,"x":2}') and not accepts_text(compiled, '{"x-a":1}')
