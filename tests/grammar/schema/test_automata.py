"""The automata our EBNF reads (:class:`ir.Text`, :class:`ir.KeyClasses`) are built only where they are used: for xgrammar's
grammar, not for llguidance's core form (``prepare_schema(automata=False)``) nor for the jsonschema probes
that filter an enum (issue 22 item 7: they were most of the normalizer's time on the slow corpus schemas);
and a ``contains`` that counts as the array's length becomes ``minItems``/``maxItems``, which llguidance reads."""

import pytest

from typedlm.errors import GrammarCompileError
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text
from typedlm.grammar.schema import prepare_schema
from typedlm.grammar.schema.ir import Contains
from typedlm.grammar.spec import make_constraint

# 86 automaton states x 61 counted lengths: past the product our EBNF writes (strings.MAX_STATES)
EMAIL_ISH = {"type": "string", "pattern": "^[a-z]{1,40}@[a-z]{1,40}\\.com$", "maxLength": 60}

SCHEMAS = [
    {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4},
    {"type": "object", "properties": {"a": {"type": "string", "minLength": 2},
                                      "b": {"type": "string", "pattern": "^20", "format": "date"}}},
    {"oneOf": [{"type": "string", "pattern": "A"}, {"type": "string", "pattern": "B"}]},
    {"anyOf": [{"type": "string", "pattern": "^[0-9]+$", "maxLength": 3}, {"type": "integer"}]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 2}},
     "patternProperties": {"^x": {"type": "string"}}, "additionalProperties": False},
]


def _plain(node):
    """The core form as plain JSON: standard keywords only."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(x) for x in node]
    return node


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_core_form_without_automata_is_the_same_schema(schema):
    full = prepare_schema(schema)
    assert "Text(" in repr(full)  # a typed node's repr holds its children's
    lean = prepare_schema(schema, automata=False)
    assert "Text(" not in repr(lean) and "KeyClasses(" not in repr(lean)
    assert _plain(lean) == _plain(full) and lean != full


def test_an_enum_probe_builds_no_automaton():
    """Filtering an enum by a string branch is jsonschema's job: the branch's automaton (too large for our
    grammar) was built for the probe and refused the schema, though the result is two enum values."""
    schema = {**EMAIL_ISH, "anyOf": [{"enum": ["ab@cd.com", "x"]}, {"const": "zz@yy.com"}]}
    assert prepare_schema(schema) == {"anyOf": [{"enum": ["ab@cd.com"]}, {"enum": ["zz@yy.com"]}]}


@pytest.fixture(scope="module")
def engines(tiny):
    return {e: Grammars(tiny.grammars.tokenizer_info, engine=e) for e in ("xgrammar", "llguidance", "auto")}


def _compile(grammars, schema):
    return grammars.compile(make_constraint(json_schema=schema, any_whitespace=False))[0]


def test_a_pattern_too_large_for_our_length_counter_is_llguidances(engines):
    """xgrammar needs our pattern x length product and refuses past its size; llguidance reads the pattern
    and maxLength itself, exactly."""
    with pytest.raises(GrammarCompileError, match="maxLength"):
        _compile(engines["xgrammar"], EMAIL_ISH)
    for name in ("llguidance", "auto"):
        compiled = _compile(engines[name], EMAIL_ISH)
        assert compiled.engine == "llguidance"
        assert accepts_text(compiled, '"ab@cd.com"')
        assert not accepts_text(compiled, '"ab@cd.org"')
        assert accepts_text(compiled, '"' + "a" * 40 + "@" + "b" * 15 + '.com"')  # 60 characters
        assert not accepts_text(compiled, '"' + "a" * 40 + "@" + "b" * 16 + '.com"')  # 61


def test_auto_falling_back_to_xgrammar_gets_the_automata(engines):
    """llguidance declines ``contains``; the xgrammar grammar ``auto`` builds instead still counts lengths
    beside a pattern (its core form is normalized again, with the automata)."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3},
                                               "b": {"type": "array", "contains": {"const": 1}}}}
    compiled = _compile(engines["auto"], schema)
    assert compiled.engine == "xgrammar"
    assert accepts_text(compiled, '{"a":"abc","b":[1]}')
    assert not accepts_text(compiled, '{"a":"abcd","b":[1]}')
    assert not accepts_text(compiled, '{"a":"ab1","b":[1]}')


@pytest.mark.parametrize("schema,core", [
    ({"type": "array", "items": {"type": "string"}, "contains": {"type": "string"}, "minContains": 2, "maxContains": 3},
     {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3}),
    ({"type": "array", "items": {"type": "string"}, "minItems": 1, "contains": {"type": ["null", "string"]}},
     {"type": "array", "items": {"type": "string"}, "minItems": 1}),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"type": "string"}, "minContains": 0,
      "maxContains": 1}, {"type": "array", "items": {"type": "integer"}}),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"type": "string"}}, {"anyOf": []}),
])
def test_a_contains_every_item_matches_or_none_is_a_length(schema, core):
    """Counted by the array's length (or never): minItems/maxItems, which llguidance reads (it has no
    ``contains``: MaskBench's ``Github_medium---o70035`` went to xgrammar for seconds)."""
    assert prepare_schema(schema) == core


def test_a_contains_that_splits_the_items_keeps_its_counter(engines):
    schema = {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "maxContains": 1}
    assert isinstance(prepare_schema(schema).ir, Contains)
    compiled = _compile(engines["auto"], schema)
    assert compiled.engine == "xgrammar"
    assert accepts_text(compiled, "[1,6,2]") and not accepts_text(compiled, "[1,2]")
    assert not accepts_text(compiled, "[6,7]")


def test_llguidance_takes_a_contains_counted_by_length(engines):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                        "contains": {"type": "string"}, "maxContains": 2}},
              "required": ["tags"]}
    compiled = _compile(engines["auto"], schema)
    assert compiled.engine == "llguidance"
    assert accepts_text(compiled, '{"tags":["a","b"]}')
    assert not accepts_text(compiled, '{"tags":[]}') and not accepts_text(compiled, '{"tags":["a","b","c"]}')


@pytest.mark.parametrize("schema,good,bad", [
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^b": {"type": "string"}},
      "additionalProperties": False}, ['{"a":1,"bx":"s"}', '{"b":"t"}'], ['{"c":1}', '{"bx":1}', '{"a":"s"}']),
    ({"type": "object", "properties": {'a"b': {"type": "integer"}}, "required": ['a"b'], "additionalProperties": False},
     ['{"a\\"b":1}'], ['{"ab":1}', '{"a\\"b":"x"}']),
])
def test_llguidance_reads_the_key_sets_our_key_classes_spell_out(engines, schema, good, bad):
    """Without key classes (:class:`ir.KeyClasses`) llguidance enforces properties, patternProperties, names needing escapes
    itself; the xgrammar grammar (our key classes) agrees on every text."""
    for name in ("llguidance", "xgrammar"):
        compiled = _compile(engines[name], schema)
        assert compiled.engine == name
        assert all(accepts_text(compiled, t) for t in good), name
        assert not any(accepts_text(compiled, t) for t in bad), name


def test_property_counts_beside_patterns_are_llguidances(engines):
    """Our key classes cannot count keys (refused for xgrammar); without them llguidance reads
    ``maxProperties`` beside ``patternProperties`` itself (MaskBench ``Handwritten---dep8``)."""
    schema = {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"],
              "patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": False, "maxProperties": 2}
    with pytest.raises(GrammarCompileError, match="maxProperties"):
        _compile(engines["xgrammar"], schema)
    compiled = _compile(engines["auto"], schema)
    assert compiled.engine == "llguidance"
    assert accepts_text(compiled, '{"b":"x","a1":1}') and accepts_text(compiled, '{"b":"x"}')
    assert not accepts_text(compiled, '{"b":"x","a1":1,"a2":2}') and not accepts_text(compiled, '{"b":"x","c":1}')
    assert not accepts_text(compiled, '{"b":"x","a1":"y"}') and not accepts_text(compiled, '{"a1":1}')
