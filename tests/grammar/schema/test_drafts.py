"""Drafts and annotations: each keyword means what its draft says; unknown keywords are ignored.

Every case is checked three ways: jsonschema (the draft's own validator) gives the verdict, typedlm's
grammar must agree, and the case names the translation it pins.
"""

import json

import jsonschema
import pytest

from typedlm.grammar.schema import find_refusals, prepare_schema
from typedlm.grammar.schema.drafts import DRAFTS, draft_of, translate

D4 = "http://json-schema.org/draft-04/schema#"
D6 = "http://json-schema.org/draft-06/schema#"
D7 = "http://json-schema.org/draft-07/schema"  # without the '#': still draft 7
D2019 = "https://json-schema.org/draft/2019-09/schema"

CASES = [
    # unknown keywords are annotations: ignored, as validators do; $ref into them still works
    ({"type": "object", "x-kubernetes-preserve-unknown-fields": True, "readonly": True,
      "properties": {"a": {"type": "integer", "example": 3, "links": [{"rel": "self"}]}}}, '{"a":"x"}'),
    ({"type": "object", "x-kubernetes-preserve-unknown-fields": True,
      "properties": {"a": {"type": "integer", "example": 3}}}, '{"a":3}'),
    ({"components": {"n": {"type": "integer", "maximum": 3}}, "$ref": "#/components/n"}, "4"),
    ({"components": {"n": {"type": "integer", "maximum": 3}}, "$ref": "#/components/n"}, "3"),
    # draft 4: boolean exclusiveMinimum, id, definitions, array items + additionalItems, dependencies
    ({"$schema": D4, "type": "number", "minimum": 3, "exclusiveMinimum": True}, "3"),
    ({"$schema": D4, "type": "number", "minimum": 3, "exclusiveMinimum": False}, "3"),
    ({"$schema": D4, "type": "number", "maximum": 3, "exclusiveMaximum": True}, "2.5"),
    ({"$schema": D4, "type": "number", "maximum": 3, "exclusiveMaximum": True}, "3"),
    ({"$schema": D4, "const": 1, "type": "integer"}, "2"),  # no const in draft 4: an annotation
    ({"$schema": D4, "id": "http://x.test/root.json", "definitions": {"s": {"type": "string"}},
      "properties": {"a": {"$ref": "#/definitions/s"}}}, '{"a":1}'),
    ({"$schema": D4, "items": [{"type": "integer"}], "additionalItems": False}, "[1]"),
    ({"$schema": D4, "items": [{"type": "integer"}], "additionalItems": False}, "[1,2]"),
    ({"$schema": D4, "items": [{"type": "integer"}], "additionalItems": {"type": "string"}}, '[1,"a",2]'),
    ({"$schema": D4, "items": {"type": "integer"}, "additionalItems": False}, "[1,2,3]"),
    ({"$schema": D4, "dependencies": {"a": ["b"]}}, '{"a":1}'),
    ({"$schema": D4, "dependencies": {"a": ["b"]}}, '{"a":1,"b":2}'),
    ({"$schema": D4, "dependencies": {"a": {"properties": {"b": {"type": "string"}}}}}, '{"a":1,"b":2}'),
    # drafts 4-7: $ref overrides its siblings
    ({"$schema": D6, "definitions": {"i": {"type": "integer"}}, "$ref": "#/definitions/i", "maximum": 3}, "5"),
    ({"$schema": D7, "definitions": {"i": {"type": "integer"}}, "$ref": "#/definitions/i", "maximum": 3}, "5"),
    ({"$schema": D2019, "$defs": {"i": {"type": "integer"}}, "$ref": "#/$defs/i", "maximum": 3}, "5"),
    # draft 6: no if/then/else yet (annotations)
    ({"$schema": D6, "if": {"type": "string"}, "then": {"maxLength": 3}}, '"abcde"'),
    ({"$schema": D7, "if": {"type": "string"}, "then": {"maxLength": 3}}, '"abcde"'),
    # 2019-09: items array + additionalItems
    ({"$schema": D2019, "items": [{"type": "string"}], "additionalItems": {"type": "integer"}}, '["a",1]'),
    ({"$schema": D2019, "items": [{"type": "string"}], "additionalItems": {"type": "integer"}}, '["a","b"]'),
]


def _verdict(schema, text):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema).is_valid(json.loads(text))


@pytest.fixture(scope="module")
def grammars():
    from tests.support.grammar import default_grammars

    return default_grammars()


@pytest.mark.parametrize("schema,text", CASES, ids=[str(i) for i in range(len(CASES))])
def test_grammar_agrees_with_the_drafts_validator(grammars, schema, text):
    from tests.support.grammar import accepts
    from typedlm.grammar.spec import make_constraint

    assert find_refusals(schema) == []
    compiled, _ = grammars.compile(make_constraint(json_schema=schema, strict=False, any_whitespace=False))
    assert accepts(compiled, text) == _verdict(schema, text)


def test_the_cases_need_the_drafts():
    """Read as 2020-12 (no $schema), at least one case of each draft would get another verdict: the
    draft detection is what the cases test."""
    for uri in (D4, D6, D7, D2019):
        drafts = [(s, t) for s, t in CASES if s.get("$schema") == uri]
        as_2020 = [({k: v for k, v in s.items() if k != "$schema"}, t) for s, t in drafts]
        assert any(_verdict(s, t) != _verdict_or_error(s2, t) for (s, t), (s2, _) in zip(drafts, as_2020)), uri


def _verdict_or_error(schema, text):
    try:
        return _verdict(schema, text)
    except Exception as e:  # e.g. draft 4's array items read as 2020-12
        return type(e).__name__


def test_draft_detection():
    assert draft_of({"$schema": D4}).name == "draft4"
    assert draft_of({"$schema": "https://json-schema.org/draft-07/schema#"}).name == "draft7"
    assert draft_of({"$schema": D2019}).name == "draft2019-09"
    assert draft_of({}).name == draft_of({"$schema": "http://example.com/custom"}).name == "draft2020-12"


def test_translate_names_the_written_keyword():
    t = translate({"items": [{}], "additionalItems": False, "dependencies": {"a": ["b"], "c": {}},
                   "title": "x", "x-foo": 1}, DRAFTS["draft7"])
    assert dict(t) == {"prefixItems": [{}], "items": False, "dependentRequired": {"a": ["b"]},
                       "dependentSchemas": {"c": {}}}
    assert t.written("prefixItems") == "items" and t.written("items") == "additionalItems"
    assert t.written("dependentSchemas") == "dependencies" and t.written("maxItems") == "maxItems"


def test_a_root_without_an_id_is_not_taken_as_the_dynamic_target():
    """jsonschema leaves such a root out of the dynamic scope: two resources define the anchor, so the
    target is refused rather than guessed."""
    schema = {"$dynamicAnchor": "n", "type": "object", "properties": {"c": {"$ref": "http://x.test/e"}},
              "$defs": {"d": {"$id": "http://x.test/d", "$dynamicAnchor": "n", "type": "string"},
                        "e": {"$id": "http://x.test/e", "$dynamicRef": "http://x.test/d#n"}}}
    r = find_refusals(schema)
    assert r and r[0].keyword == "$dynamicRef"


def test_known_validation_keywords_are_still_refused():
    # two resources define the dynamic anchor and the root does not: the target depends on the scope
    schema = {"$defs": {"a": {"$id": "http://x.test/a", "$dynamicAnchor": "n", "type": "integer"},
                        "b": {"$id": "http://x.test/b", "$dynamicAnchor": "n",
                              "properties": {"c": {"$dynamicRef": "#n"}}}},
              "$ref": "http://x.test/b"}
    r = find_refusals(schema)
    assert r and r[0].keyword == "$dynamicRef" and r[0].pointer == "/$ref/properties/c/$dynamicRef", r


@pytest.mark.parametrize("schema,text,valid", [
    # the root defines the anchor: it wins wherever the reference sits (the outermost dynamic scope)
    ({"$id": "http://x.test/root", "$dynamicAnchor": "n", "type": "object",
      "properties": {"c": {"$ref": "http://x.test/e"}},
      "additionalProperties": False,
      "$defs": {"d": {"$id": "http://x.test/d", "$dynamicAnchor": "n", "type": "string"},
                "e": {"$id": "http://x.test/e", "$dynamicRef": "http://x.test/d#n"}}}, '{"c":"x"}', False),
    ({"$id": "http://x.test/root", "$dynamicAnchor": "n", "type": "object",
      "properties": {"c": {"$ref": "http://x.test/e"}},
      "additionalProperties": False,
      "$defs": {"d": {"$id": "http://x.test/d", "$dynamicAnchor": "n", "type": "string"},
                "e": {"$id": "http://x.test/e", "$dynamicRef": "http://x.test/d#n"}}}, '{"c":{"c":{}}}', True),
    # only one resource defines it: a plain $ref
    ({"$defs": {"i": {"$dynamicAnchor": "n", "type": "integer"}}, "$dynamicRef": "#n"}, "1", True),
    ({"$defs": {"i": {"$dynamicAnchor": "n", "type": "integer"}}, "$dynamicRef": "#n"}, '"x"', False),
    # 2019-09: $recursiveRef to a root with $recursiveAnchor
    ({"$schema": D2019, "$id": "http://x.test/r", "$recursiveAnchor": True, "type": "object",
      "properties": {"c": {"$recursiveRef": "#"}}, "additionalProperties": False}, '{"c":{"c":{}}}', True),
    ({"$schema": D2019, "$id": "http://x.test/r", "$recursiveAnchor": True, "type": "object",
      "properties": {"c": {"$recursiveRef": "#"}}, "additionalProperties": False}, '{"c":{"d":1}}', False),
])
def test_dynamic_references_resolved_statically(grammars, schema, text, valid):
    from tests.support.grammar import accepts
    from typedlm.grammar.spec import make_constraint

    assert _verdict(schema, text) == valid
    compiled, _ = grammars.compile(make_constraint(json_schema=schema, strict=False, any_whitespace=False))
    assert accepts(compiled, text) == valid
    # an annotation beside it changes nothing
    assert prepare_schema({"type": "integer", "frobnicate": {"contains": 1}}) == {"type": "integer"}
