"""llguidance takes ``minProperties``/``maxProperties`` beside optional keys and ``propertyNames`` through the
rewrites of ``typedlm/grammar/llg_objects.py``, and reads them exactly: every small object (keys in the
schema's order) is accepted by the llguidance grammar iff jsonschema accepts it."""

import itertools
import json

import jsonschema
import pytest

from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.llg import LLGrammar, NotForLLGuidance
from typedlm.grammar.llg_objects import MAX_COUNT_BRANCHES
from typedlm.grammar.spec import make_constraint

INT = {"type": "integer"}
SCHEMAS = [
    {"type": "object", "properties": {"a": INT, "b": INT, "c": INT}, "minProperties": 1},
    {"type": "object", "properties": {"a": INT, "b": INT, "c": INT}, "minProperties": 2, "additionalProperties": False},
    {"type": "object", "properties": {"a": INT, "b": INT}, "required": ["a"], "maxProperties": 2},
    {"type": "object", "properties": {"a": INT, "b": INT, "c": INT}, "minProperties": 1, "maxProperties": 1},
    {"type": "object", "properties": {"a": INT, "b": INT, "c": INT}, "minProperties": 1, "maxProperties": 2,
     "additionalProperties": False},
    {"type": "object", "properties": {"a": INT, "b": INT}, "patternProperties": {"^x": INT},
     "additionalProperties": False, "minProperties": 2},
    {"type": "object", "properties": {"a": INT, "b": INT}, "required": ["a"], "minProperties": 3},
    {"type": "object", "properties": {"a": INT, "b": False}, "minProperties": 1},
    {"type": "object", "propertyNames": {"enum": ["a", "x", "y.z"]}, "additionalProperties": INT},
    {"type": "object", "properties": {"a": {"enum": [7]}, "b": INT}, "propertyNames": {"enum": ["a", "x"]},
     "additionalProperties": INT},
    {"type": "object", "propertyNames": {"pattern": "^[a-x]$"}, "additionalProperties": INT},
    {"type": "object", "propertyNames": {"type": "string", "minLength": 2}, "additionalProperties": INT},
    {"type": "object", "propertyNames": {"maxLength": 1}, "additionalProperties": False},
    {"type": "object", "propertyNames": {"enum": ["a", "b", "x", "y"]}, "additionalProperties": INT,
     "minProperties": 1, "maxProperties": 2},
    {"type": "object", "properties": {"p": {"type": "object", "properties": {"a": INT, "b": INT}, "maxProperties": 1}},
     "required": ["p"]},
]
KEYS = ["a", "b", "c", "x", "y.z", "z", "xa"]


def _objects(schema):
    """Objects over :data:`KEYS` (up to 3 keys, values 7 or "s"), listed keys first in the schema's order."""
    listed = list(schema.get("properties", {}))
    for n in range(4):
        for keys in itertools.combinations(KEYS, n):
            keys = [k for k in listed if k in keys] + [k for k in keys if k not in listed]
            for values in itertools.product([7, "s"], repeat=n):
                yield dict(zip(keys, values))


@pytest.fixture(scope="module")
def llg(tiny):
    return Grammars(tiny.grammars.tokenizer_info, engine="llguidance")


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_object_counts_and_names_are_llguidances_and_exact(llg, schema):
    compiled = llg.compile(make_constraint(json_schema=schema, any_whitespace=False, strict=False))[0]
    assert isinstance(compiled, LLGrammar)
    validator = jsonschema.Draft202012Validator(schema)
    wrong = [x for x in _objects(schema) if "p" not in schema.get("properties", {})
             and accepts_text(compiled, json.dumps(x, separators=(",", ":"))) != validator.is_valid(x)]
    assert wrong == []
    if "p" in schema.get("properties", {}):  # nested: the count applies to the inner object
        for inner in _objects(schema["properties"]["p"]):
            x = {"p": inner}
            assert accepts_text(compiled, json.dumps(x, separators=(",", ":"))) == validator.is_valid(x), x


def test_too_many_count_branches_are_declined_and_auto_takes_xgrammar(llg, tiny):
    keys = {f"k{i}": INT for i in range(12)}
    schema = {"type": "object", "properties": keys, "maxProperties": 6}  # sum C(12, <=6) > MAX_COUNT_BRANCHES
    with pytest.raises(NotForLLGuidance, match="branches"):
        llg.compile(make_constraint(json_schema=schema, any_whitespace=False, strict=False))
    auto = Grammars(tiny.grammars.tokenizer_info, engine="auto")
    compiled = auto.compile(make_constraint(json_schema=schema, any_whitespace=False, strict=False))[0]
    assert not isinstance(compiled, LLGrammar)
