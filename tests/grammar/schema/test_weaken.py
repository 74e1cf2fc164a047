"""The relaxing pass (``grammar/schema/weaken.py``): one normalizer run that drops a refused keyword where
it is used positively; the grammar is a superset of the schema, every drop is named, strict still refuses."""

import json
import warnings

import hypothesis.strategies as st
import jsonschema
import pytest
from hypothesis import given, settings

from typedlm.errors import GrammarCompileError
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.compiler import RelaxedSchemaWarning
from typedlm.grammar.schema import prepare_relaxed, prepare_schema
from typedlm.grammar.spec import make_constraint

UNIQUE = {"type": "array", "uniqueItems": True, "contains": {"type": "integer"}}  # refused: uniqueItems beside contains
# ECMA lookaround past the start: not a regular language, refused exactly (a leading ^(?!X) in a name is not)
LOOK = "a(?!x)"


@pytest.fixture(scope="module")
def grammars(tiny):
    return Grammars(tiny.grammars.tokenizer_info)


def _relaxed(grammars, schema):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, _ = grammars.compile(make_constraint(json_schema=schema, strict=False, lenient=True))
    notes = [str(w.message) for w in caught if issubclass(w.category, RelaxedSchemaWarning)]
    return compiled, notes


def test_many_refusals_are_relaxed_in_one_pass_and_named():
    schema = {"type": "object", "properties": {f"k{i}": UNIQUE for i in range(80)}}
    core, done = prepare_relaxed(schema)
    assert [d["pointer"] for d in done] == [f"/properties/k{i}/uniqueItems" for i in range(80)]
    assert {d["action"] for d in done} == {"dropped 'uniqueItems'"}
    with pytest.raises(GrammarCompileError) as e:
        prepare_schema(schema)
    assert e.value.keyword == "uniqueItems"


def test_an_exact_schema_is_not_relaxed():
    schema = {"type": "object", "properties": {"a": {"type": "integer", "maximum": 3}}, "required": ["a"]}
    core, done = prepare_relaxed(schema)
    assert done == [] and core == prepare_schema(schema)


@pytest.mark.parametrize("schema, action", [
    # an overlapping oneOf whose branch is refused: anyOf of the branches
    ({"oneOf": [UNIQUE, {"type": "array", "maxItems": 1}]}, "oneOf relaxed to anyOf"),
    # if/then/else whose condition is refused: anyOf [then, else]
    ({"type": "array", "if": UNIQUE, "then": {"maxItems": 2}, "else": {"minItems": 1}},
     "if/then/else relaxed to anyOf [then, else]"),
    # under not: the not goes (a weaker negated schema would make the whole stricter)
    ({"type": "array", "not": UNIQUE}, "dropped 'not'"),
])
def test_non_positive_places_drop_the_applicator(schema, action):
    _, done = prepare_relaxed(schema)
    assert done[0]["action"] == action


def test_unevaluated_properties_goes_when_a_part_it_reads_was_relaxed(grammars):
    """The allOf member loses its patternProperties (lookaround); unevaluatedProperties: false kept would
    then reject the key that pattern evaluated: stricter than the schema."""
    schema = {"type": "object", "allOf": [{"properties": {"a": {}}, "patternProperties": {LOOK: {}}}],
              "unevaluatedProperties": False}
    assert jsonschema.Draft202012Validator(schema).is_valid({"ab": 1})
    compiled, notes = _relaxed(grammars, schema)
    assert accepts_text(compiled, '{"ab":1}') and accepts_text(compiled, '{"a":1}')
    assert notes and "patternProperties" in notes[0] and "unevaluatedProperties" in notes[0]


def test_strict_refuses_and_lenient_warns_naming_the_keyword(grammars):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                        "uniqueItems": True, "contains": {"const": "a"}}}}
    with pytest.raises(GrammarCompileError) as e:
        grammars.compile(make_constraint(json_schema=schema, strict=False))
    assert e.value.keyword == "uniqueItems"
    compiled, notes = _relaxed(grammars, schema)
    assert notes and "uniqueItems at /properties/tags/uniqueItems" in notes[0]
    assert accepts_text(compiled, '{"tags":["a","a"]}')  # the superset; validation after generation rejects it
    assert not accepts_text(compiled, '{"tags":[1]}')  # everything else still enforced


def test_two_recursive_sides_refuse_instead_of_recursing_forever():
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}
    other = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/u"}}},
             "required": ["kids"]}
    schema = {"$defs": {"t": tree, "u": {**other, "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/u"}}}}},
              "allOf": [{"$ref": "#/$defs/t"}, {"$ref": "#/$defs/u"}]}
    with pytest.raises(GrammarCompileError) as e:
        prepare_schema(schema)
    assert "recursive" in str(e.value)


INSTANCES = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "ab", "xa", ""]),
                         lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(["a", "ab", "b"]), c,
                                                                              max_size=3),
                         max_leaves=8)
SCHEMAS = [
    {"type": "object", "properties": {"a": {"not": UNIQUE}, "b": UNIQUE}},
    {"not": {"properties": {"a": UNIQUE}, "required": ["a"]}},
    {"oneOf": [UNIQUE, {"type": "array", "maxItems": 1}]},
    {"anyOf": [{"if": UNIQUE, "then": {"maxItems": 2}}, {"type": "integer", "not": {"const": 2}}]},
    {"$defs": {"x": UNIQUE}, "properties": {"a": {"$ref": "#/$defs/x"}, "b": {"not": {"$ref": "#/$defs/x"}}}},
    {"type": "array", "contains": UNIQUE, "maxContains": 1},
    {"allOf": [{"properties": {"a": UNIQUE}, "patternProperties": {LOOK: {"type": "integer"}}}],
     "unevaluatedProperties": False},
    {"type": "string", "pattern": LOOK, "minLength": 2},
]


def _listed_first(x):
    """The grammar writes listed properties ("a", "b" here) first, in the schema's order, then the others."""
    if isinstance(x, dict):
        keys = [k for k in ("a", "b") if k in x] + [k for k in x if k not in ("a", "b")]
        return {k: _listed_first(x[k]) for k in keys}
    return [_listed_first(v) for v in x] if isinstance(x, list) else x


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=150, deadline=None, derandomize=True)
@given(instance=INSTANCES)
def test_relaxed_grammar_accepts_every_valid_instance(grammars, schema, instance):
    """Soundness of the superset, through the compiled grammar (real xgrammar)."""
    if jsonschema.Draft202012Validator(schema).is_valid(instance):
        compiled, _ = _relaxed(grammars, schema)
        assert accepts_text(compiled, json.dumps(_listed_first(instance), separators=(",", ":"))), (schema, instance)


def test_the_pass_relaxes_a_refusal_met_when_emitting():
    """A refusal the build cannot see (met when emitting the branch) is relaxed there, in the same pass."""
    schema = {"type": "object", "minProperties": 1, "properties": {"a": {}, "b": {}},
              "patternProperties": {"^x": {}, "^y": {}}}
    with pytest.raises(GrammarCompileError) as e:
        prepare_schema(schema)
    assert e.value.keyword == "minProperties"
    core, done = prepare_relaxed(schema)
    assert [(d["keyword"], d["action"]) for d in done] == [("minProperties", "dropped 'minProperties'")]
    assert prepare_schema({k: v for k, v in schema.items() if k != "minProperties"}) == core


def test_unevaluated_properties_goes_beside_a_reused_relaxed_target(grammars):
    """The same $ref target relaxed at its first use and met again (memo) under unevaluatedProperties."""
    target = {"properties": {"a": {}}, "patternProperties": {LOOK: {}}}
    schema = {"$defs": {"t": target}, "type": "object",
              "properties": {"first": {"$ref": "#/$defs/t"},
                             "second": {"allOf": [{"$ref": "#/$defs/t"}], "unevaluatedProperties": False}}}
    assert jsonschema.Draft202012Validator(schema).is_valid({"second": {"ab": 1}})
    compiled, notes = _relaxed(grammars, schema)
    assert accepts_text(compiled, '{"second":{"ab":1}}'), notes


@pytest.mark.parametrize("prepare", [prepare_schema, prepare_relaxed])
def test_invalid_identifiers_are_a_named_refusal(prepare):
    """A refusal raised while reading the schema's identifiers is a GrammarCompileError naming '$id'."""
    with pytest.raises(GrammarCompileError) as e:
        prepare({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": [{"a": 1}]})
    assert e.value.keyword == "$id"
