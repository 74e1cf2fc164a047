"""Repeated subschemas said once for llguidance (``typedlm/grammar/backends/llguidance_shared.py``): a repeated
schema object becomes one ``$defs`` entry its places ``$ref``; values that are not schemas (``enum`` objects,
``dependentRequired``) and the root stay; the compiled language is the same."""

import pytest

from typedlm.grammar.backends.llguidance_shared import PREFIX, share_repeats
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.spec import make_constraint

ITEM = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0}, "name": {"type": "string"},
                                         "tags": {"type": "array", "items": {"type": "string"}},
                                         "meta": {"type": "object", "properties": {"k": {"type": "string"}}}},
        "required": ["id"], "additionalProperties": False}


def test_a_repeated_object_is_moved_to_defs_once():
    root = {"type": "object", "properties": {"a": dict(ITEM), "b": {"type": "array", "items": dict(ITEM)},
                                             "c": {"enum": [dict(ITEM), dict(ITEM)]}},
            "dependentRequired": {"a": ["b"]}}
    out = share_repeats(root)
    [name] = [k for k in out["$defs"] if k.startswith(PREFIX)]
    ref = {"$ref": f"#/$defs/{name}"}
    assert out["properties"]["a"] == ref and out["properties"]["b"]["items"] == ref
    assert out["$defs"][name] == ITEM and list(out["$defs"][name]["properties"]) == ["id", "name", "tags", "meta"]
    assert out["properties"]["c"] == root["properties"]["c"] and out["dependentRequired"] == {"a": ["b"]}


def test_nothing_repeated_nothing_changes():
    root = {"type": "object", "properties": {"a": ITEM, "b": {"type": "integer"}}}
    assert share_repeats(root) is root
    small = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    assert share_repeats(small) is small  # too small to be worth a rule


@pytest.mark.parametrize("text,ok", [('{"a":{"id":1},"b":[{"id":2,"name":"x"}]}', True),
                                     ('{"a":{"id":-1},"b":[]}', False), ('{"a":{"id":1,"z":1}}', False),
                                     ('{"b":[{"id":3,"tags":["t"]},{"id":4,"meta":{"k":"v"}}]}', True),
                                     ('{"b":[{"id":4,"meta":{"k":1}}]}', False)])
def test_the_language_is_the_same(tiny, text, ok):
    schema = {"type": "object", "properties": {"a": ITEM, "b": {"type": "array", "items": ITEM}},
              "additionalProperties": False}
    compiled, _ = Grammars(tiny.grammars.tokenizer_info, engine="llguidance").compile(
        make_constraint(json_schema=schema, any_whitespace=False))
    assert accepts_text(compiled, text) == ok
