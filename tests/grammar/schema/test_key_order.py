"""Key order: properties come out in the order the schema wrote them (through ``$ref`` and ``allOf``
members in order); a key named only by ``required`` goes after the listed ones. The grammar fixes key
order, so a moved key would force the model to write keys in an order the author never wrote."""

import pytest
from pydantic import BaseModel

from typedlm.grammar.schema import prepare_schema
from typedlm.grammar.spec import make_constraint

LIGHT = {"type": "object", "properties": {"intensity": {"type": "number"}, "power": {"type": "boolean"},
                                          "resourceType": {"const": "light"}}}


def _keys(schema) -> list[str]:
    core = prepare_schema(schema)
    objects = [b for b in core.get("anyOf", [core]) if b.get("type") == "object"]
    assert len(objects) == 1, core
    return list(objects[0]["properties"])


@pytest.fixture(scope="module")
def grammars():
    from tests.support.grammar import default_grammars

    return default_grammars()


def _accepts(grammars, schema, text) -> bool:
    from tests.support.grammar import accepts

    compiled, _ = grammars.compile(make_constraint(json_schema=schema, strict=False, any_whitespace=False))
    return accepts(compiled, text)


def test_required_beside_ref_keeps_the_definitions_order(grammars):
    schema = {"$defs": {"light": LIGHT}, "$ref": "#/$defs/light", "required": ["resourceType", "power"]}
    assert _keys(schema) == ["intensity", "power", "resourceType"]
    assert _accepts(grammars, schema, '{"intensity":1,"power":true,"resourceType":"light"}')
    assert not _accepts(grammars, schema, '{"intensity":1,"resourceType":"light"}')  # power is required


def test_draft7_required_inside_allof_beside_ref():
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"light": LIGHT},
              "allOf": [{"$ref": "#/definitions/light"}, {"required": ["resourceType", "power"]}]}
    assert _keys(schema) == ["intensity", "power", "resourceType"]


def test_allof_of_two_objects_in_member_order():
    schema = {"allOf": [{"type": "object", "properties": {"b": {}, "a": {}}, "required": ["c", "a"]},
                        {"properties": {"d": {}, "c": {}}, "required": ["z", "b"]}]}
    assert _keys(schema) == ["b", "a", "d", "c", "z"]


def test_ref_written_before_properties_comes_first():
    defs = {"base": {"type": "object", "properties": {"id": {"type": "integer"}}}}
    first = {"$defs": defs, "$ref": "#/$defs/base", "properties": {"name": {"type": "string"}}, "required": ["x"]}
    last = {"$defs": defs, "properties": {"name": {"type": "string"}}, "$ref": "#/$defs/base"}
    assert _keys(first) == ["id", "name", "x"]
    assert _keys(last) == ["name", "id"]


class Answer(BaseModel):
    value: int


class Thought(BaseModel):
    reasoning: str
    answer: Answer
    confidence: float


def test_pydantic_model_keeps_reasoning_first(grammars):
    schema = Thought.model_json_schema()
    assert _keys(schema) == ["reasoning", "answer", "confidence"]
    # the model used through a reference that also names required keys (OpenAPI-style)
    defs = {**schema.pop("$defs"), "Thought": schema}
    required_first = {"$defs": defs, "$ref": "#/$defs/Thought", "required": ["confidence", "answer"]}
    assert _keys(required_first) == ["reasoning", "answer", "confidence"]
    text = '{"reasoning":"r","answer":{"value":1},"confidence":0.5}'
    assert _accepts(grammars, required_first, text)
    assert not _accepts(grammars, required_first, '{"answer":{"value":1},"reasoning":"r","confidence":0.5}')
