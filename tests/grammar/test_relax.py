"""The schema-text relaxation (``relax._relax_one``: what ``relaxed_core`` falls back on for a refusal met
only when emitting): sound by polarity, and only what must go. Driven here refusal by refusal."""

import copy
import json

import hypothesis.strategies as st
import jsonschema
import pytest
from hypothesis import given, settings

from typedlm.grammar.relax import _relax_one
from typedlm.grammar.schema import find_refusals

UNIQUE = {"type": "array", "uniqueItems": True, "contains": {"type": "integer"}}  # refused: uniqueItems beside contains
KEPT = {"type": "array", "contains": {"type": "integer"}}


def relax_schema(schema):
    """``_relax_one`` on each refusal in turn until none is left: (superset schema, the relaxed places)."""
    out, done = copy.deepcopy(schema), []
    for _ in range(64):
        refusals = find_refusals(out)
        if not refusals:
            return out, done
        r = refusals[0]
        out, action = _relax_one(out, r.keyword, r.pointer)
        done.append({"keyword": r.keyword, "pointer": r.pointer or "/", "action": action})
    raise AssertionError("more than 64 refusals")


@pytest.mark.parametrize("schema, relaxed", [
    # positive: the keyword (and its companions) go, everything else stays
    ({"type": "object", "properties": {"a": UNIQUE, "b": {"type": "integer", "maximum": 3}}, "required": ["a"]},
     {"type": "object", "properties": {"a": KEPT, "b": {"type": "integer", "maximum": 3}},
      "required": ["a"]}),
    # under not: dropping uniqueItems there would make the schema stricter; the whole not goes instead
    ({"type": "object", "properties": {"a": {"type": "array", "not": UNIQUE}}},
     {"type": "object", "properties": {"a": {"type": "array"}}}),
    # in an if condition: if/then/else go together
    ({"type": "array", "if": UNIQUE, "then": {"minItems": 2}, "else": {"maxItems": 5}}, {"type": "array"}),
    # a not over a format xgrammar checks (not expressible): the not goes, the type stays
    ({"type": "object", "properties": {"a": {"type": "string", "not": {"format": "email"}}}},
     {"type": "object", "properties": {"a": {"type": "string"}}}),
    # $ref: the target is inlined at the use site; the definition itself is kept for other uses
    ({"$defs": {"x": UNIQUE}, "type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}},
     {"$defs": {"x": UNIQUE}, "type": "object", "properties": {"a": {"allOf": [KEPT]}}}),
])
def test_relax_drops_only_what_it_must(schema, relaxed):
    out, done = relax_schema(schema)
    assert out == relaxed
    assert done and find_refusals(out) == []


INSTANCES = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "ab", ""]),
                         lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from("abc"), c, max_size=3),
                         max_leaves=8)
SCHEMAS = [
    {"type": "object", "properties": {"a": {"not": UNIQUE}, "b": UNIQUE}},
    {"not": {"properties": {"a": UNIQUE}, "required": ["a"]}},
    {"oneOf": [UNIQUE, {"type": "array", "maxItems": 1}]},
    {"anyOf": [{"if": UNIQUE, "then": {"maxItems": 2}}, {"type": "integer", "not": {"const": 2}}]},
    {"$defs": {"x": UNIQUE}, "properties": {"a": {"$ref": "#/$defs/x"}, "b": {"not": {"$ref": "#/$defs/x"}}}},
    {"type": "string", "minLength": 2, "pattern": "^a"},
    {"type": "string", "maxLength": 3000, "pattern": "^a", "not": {"format": "email"}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=300, deadline=None, derandomize=True)
@given(instance=INSTANCES)
def test_relaxed_schema_accepts_every_valid_instance(schema, instance):
    """Soundness: relaxing never rejects what the original accepts (a superset)."""
    relaxed, _ = relax_schema(schema)
    if jsonschema.Draft202012Validator(schema).is_valid(instance):
        assert jsonschema.Draft202012Validator(relaxed).is_valid(instance), json.dumps(relaxed)
