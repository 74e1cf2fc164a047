"""Each exact rewrite of typedlm.grammar.schema, pinned by instances that raw xgrammar gets wrong.

``CASES``: (rewrite, schema, text, schema-valid?). For each, typedlm's grammar must agree with
jsonschema; and for each rewrite, raw xgrammar on the original schema gets at least one of its cases
wrong (a wrong verdict or a compile error): the rewrite is what makes it right.
"""

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typedlm.errors import EmptySchemaError, GrammarCompileError
from typedlm.grammar.schema import find_refusals, prepare_schema
from typedlm.grammar.schema.refusal import pattern_problem, rewrite_pattern

CASES = [
    ("type split", {"maximum": 3}, "5", False),
    ("type split", {"maximum": 3}, '"x"', True),
    ("type split", {"minLength": 2}, "[1]", True),
    ("enum filter", {"type": "integer", "minimum": 2, "enum": [1, "a", 2]}, "1", False),
    ("enum filter", {"enum": ["ab", "abc"], "maxLength": 2}, '"abc"', False),
    ("allOf intersection", {"allOf": [{"properties": {"bar": {"type": "integer"}}, "required": ["bar"]},
                                      {"properties": {"foo": {"type": "string"}}, "required": ["foo"]}]},
     '{"bar":"x","foo":"y"}', False),
    ("allOf intersection", {"allOf": [{"maximum": 30}, {"minimum": 20}]}, "35", False),
    ("anyOf beside keywords", {"type": "object", "properties": {"a": {"type": "integer"}},
                               "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, "{}", False),
    ("$ref beside keywords", {"$defs": {"m": {"maximum": 5}}, "$ref": "#/$defs/m", "minimum": 2}, "1", False),
    ("oneOf disjoint", {"oneOf": [{"type": "integer"}, {"type": "string"}]}, "1", True),
    ("oneOf overlapping", {"type": "object", "oneOf": [{"required": ["foo", "bar"]}, {"required": ["foo", "baz"]}]},
     '{"foo":1,"bar":2,"baz":3}', False),
    ("oneOf overlapping", {"type": "object", "oneOf": [{"required": ["foo", "bar"]}, {"required": ["foo", "baz"]}]},
     '{"foo":1,"bar":2}', True),
    ("not type", {"not": {"type": "string"}}, '"x"', False),
    ("not type", {"not": {"type": "string"}}, "1", True),
    ("not bound", {"type": "number", "not": {"minimum": 3}}, "4", False),
    ("not string enum", {"type": "string", "not": {"enum": ["then", "the"]}}, '"then"', False),
    ("not string enum", {"type": "string", "not": {"enum": ["then", "the"]}}, '"th"', True),
    ("not string enum", {"type": "string", "not": {"enum": ["then", "the"]}}, '"thenx"', True),
    ("not string enum", {"not": {"const": ""}}, '""', False),
    ("not prefixItems", {"type": "array", "not": {"prefixItems": [{"type": "string"}]}}, "[1,2]", True),
    ("not prefixItems", {"type": "array", "not": {"prefixItems": [{"type": "string"}]}}, '["a"]', False),
    ("not prefixItems", {"type": "array", "not": {"prefixItems": [{"type": "string"}]}}, "[]", False),
    ("not required", {"type": "object", "not": {"required": ["a"]}}, '{"a":1}', False),
    ("if/then/else", {"if": {"maximum": 0}, "then": {"minimum": -10}, "else": {"maximum": 10}}, "-11", False),
    ("if/then/else", {"if": {"maximum": 0}, "then": {"minimum": -10}, "else": {"maximum": 10}}, "11", False),
    ("if/then/else", {"if": {"maximum": 0}, "then": {"minimum": -10}, "else": {"maximum": 10}}, "5", True),
    ("dependentRequired", {"dependentRequired": {"bar": ["foo"]}}, '{"bar":2}', False),
    ("dependentRequired", {"dependentRequired": {"bar": ["foo"]}}, '{"foo":1}', True),
    ("dependentSchemas", {"dependentSchemas": {"bar": {"properties": {"foo": {"type": "integer"}}}}},
     '{"bar":2,"foo":"x"}', False),
    ("required not in properties", {"type": "object", "required": ["a"]}, "{}", False),
    ("integer multipleOf", {"multipleOf": 2}, "7", False),
    ("integer multipleOf", {"type": "number", "multipleOf": 2}, "3", False),
    ("multipleOf between bounds", {"multipleOf": 3, "minimum": -10, "maximum": 10}, "-4", False),
    ("multipleOf between bounds", {"multipleOf": 3, "minimum": -10, "maximum": 10}, "-9", True),
    ("multipleOf between bounds", {"multipleOf": 3, "minimum": -10, "maximum": 10}, "12", False),
    ("integer bounds made whole", {"type": "integer", "minimum": 1.5}, "2", True),
    ("integer bounds made whole", {"type": "integer", "exclusiveMaximum": 3}, "3", False),
    ("lengths alone: raw characters, no escape", {"type": "string", "maxLength": 3}, '"abc"', True),
    ("lengths alone: raw characters, no escape", {"type": "string", "maxLength": 3}, '"abcd"', False),
    ("lengths alone: raw characters, no escape", {"type": "string", "minLength": 2}, '"a"', False),
    ("lengths alone: raw characters, no escape", {"type": "string", "minLength": 1, "maxLength": 9000},
     "\"a bé\"", True),
    ("lengths alone: raw characters, no escape", {"type": "object", "properties": {
        "a": {"type": "string", "pattern": "^[a-z]*$", "maxLength": 3}, "b": {"type": "string", "maxLength": 3}}},
     '{"a":"ab","b":"a b"}', True),  # two counted strings of one length, different classes
    ("lengths alone: raw characters, no escape", {"type": "object", "properties": {
        "a": {"type": "string", "pattern": "^[a-z]*$", "maxLength": 3}, "b": {"type": "string", "maxLength": 3}}},
     '{"a":"abcd","b":"a"}', False),  # xgrammar alone drops a length beside a pattern
    ("number range of any precision", {"type": "number", "exclusiveMinimum": 0}, "0.12345678901234567", True),
    ("number range of any precision", {"type": "number", "exclusiveMinimum": 0}, "0", False),
    ("number range of any precision", {"type": "number", "minimum": -1.5, "maximum": 2}, "-1.50000001", False),
    ("number range of any precision", {"type": "number", "minimum": -1.5, "maximum": 2}, "1.99999999999", True),
    ("number range of any precision", {"type": "number", "exclusiveMaximum": 0.1}, "0.0999999999", True),
    ("number range of any precision", {"type": "number", "exclusiveMaximum": 0.1}, "0.1", False),
    ("format beside pattern", {"type": "string", "format": "uri", "pattern": "^https?://"}, '"https://a.org/x"', True),
    ("format beside pattern", {"type": "string", "format": "uri", "pattern": "^https?://"}, '"https://a b"', False),
    ("format beside pattern", {"type": "string", "format": "uri", "pattern": "^https?://"}, '"ftp://a.org"', False),
    ("format beside pattern", {"type": "string", "format": "date", "pattern": "-01$", "maxLength": 10},
     '"2024-02-01"', True),
    ("format beside pattern", {"type": "string", "format": "date", "pattern": "-01$"}, '"2024-02-31"', False),
    ("pattern search", {"type": "string", "pattern": "b"}, '"abc"', True),
    ("pattern group ? as {0,1}", {"type": "string", "pattern": "^(ab+)?$"}, '"b"', False),
    ("pattern group ? as {0,1}", {"type": "string", "pattern": "^(ab+)?$"}, '"abb"', True),
    ("pattern ECMA dot", {"type": "string", "pattern": "^a.c$"}, '"a\u2028c"', False),
    ("uniqueItems small enum", {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True}, "[1,1]", False),
    ("uniqueItems small enum", {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True}, "[2,1]", True),
    ("unevaluatedProperties alone", {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False},
     '{"a":1,"b":2}', False),
    ("uniqueItems finite space", {"prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "items": False,
                                  "uniqueItems": True}, "[true,true]", False),
    ("uniqueItems finite space", {"prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "items": False,
                                  "uniqueItems": True}, "[false,true]", True),
    ("format as an exact regex", {"type": "string", "format": "date"}, '"2020-02-30"', False),
    ("format as an exact regex", {"type": "string", "format": "date"}, '"2020-02-29"', True),
    ("format as an exact regex", {"type": "string", "format": "date"}, '"2021-02-29"', False),
    ("format as an exact regex", {"type": "string", "format": "ipv6"}, '"::ffff:1.2.3.4"', True),
    ("format as an exact regex", {"type": "string", "format": "ipv6"}, '"1:2:3:4:5:6:7:8:9"', False),
    ("format as an exact regex", {"type": "string", "format": "duration"}, '"P1Y2M3DT4H5M6S"', True),
    ("format as an exact regex", {"type": "string", "format": "duration"}, '"PT1D"', False),
    ("format as an exact regex", {"type": "string", "format": "json-pointer"}, '"/a~1b/~0"', True),
    ("format as an exact regex", {"type": "string", "format": "json-pointer"}, '"/a~2"', False),
    ("unevaluatedProperties after applicators",
     {"properties": {"foo": {"type": "string"}}, "allOf": [{"properties": {"bar": {"type": "string"}}}],
      "unevaluatedProperties": False}, '{"foo":"a","bar":"b","baz":"c"}', False),
    ("unevaluatedProperties after applicators",
     {"properties": {"foo": {"type": "string"}}, "allOf": [{"properties": {"bar": {"type": "string"}}}],
      "unevaluatedProperties": False}, '{"foo":"a","bar":"b"}', True),
    ("unevaluatedItems after applicators", {"prefixItems": [{"type": "string"}], "allOf": [
        {"prefixItems": [True, {"type": "number"}]}], "unevaluatedItems": False}, '["foo",42,true]', False),
    ("unevaluatedItems after applicators", {"prefixItems": [{"type": "string"}], "allOf": [
        {"prefixItems": [True, {"type": "number"}]}], "unevaluatedItems": False}, '["foo",42]', True),
    ("unevaluatedItems alone", {"type": "array", "prefixItems": [{}], "unevaluatedItems": False}, "[1,2]", False),
    ("propertyNames with closed objects", {"type": "object", "properties": {"ab": {}, "abcd": {}},
                                           "additionalProperties": False, "propertyNames": {"maxLength": 3}},
     '{"abcd":1}', False),
    ("contains with minContains 0", {"type": "array", "contains": {"type": "string"}, "minContains": 0}, "[1]", True),
    ("property absent", {"type": "object", "dependentSchemas": {"a": False}}, '{"a":1}', False),
    ("contains counted", {"type": "array", "contains": {"const": 1}, "minContains": 2, "maxContains": 3},
     "[1,2,1]", True),
    ("contains counted", {"type": "array", "contains": {"const": 1}, "minContains": 2, "maxContains": 3},
     "[1,2]", False),
    ("contains counted", {"type": "array", "contains": {"const": 1}, "minContains": 2, "maxContains": 3},
     "[1,1,2,1,1]", False),
    ("contains splits items", {"items": {"type": "integer"}, "contains": {"minimum": 5}}, "[1,6,2]", True),
    ("contains splits items", {"items": {"type": "integer"}, "contains": {"minimum": 5}}, "[1,2]", False),
    ("contains splits items", {"items": {"type": "integer"}, "contains": {"minimum": 5}}, "[]", False),
    ("not contains", {"not": {"contains": {"type": "string"}}}, '[1,"a"]', False),
    ("not contains", {"not": {"contains": {"type": "string"}}}, "[1,2]", True),
    ("not integer", {"not": {"type": "integer"}}, "1.5", True),
    ("not integer", {"not": {"type": "integer"}}, "2.0", False),
    ("not integer", {"not": {"type": "integer"}}, "-0.0", False),
    ("not an enum of numbers", {"not": {"enum": [1, 2.5]}}, "2.5", False),
    ("not an enum of numbers", {"not": {"enum": [1, 2.5]}}, "1.0", False),
    ("not an enum of numbers", {"not": {"enum": [1, 2.5]}}, "2", True),
    ("multipleOf beside one bound", {"type": "integer", "multipleOf": 3, "minimum": -10}, "-4", False),
    ("multipleOf beside one bound", {"type": "integer", "multipleOf": 3, "minimum": -10}, "-9", True),
    ("multipleOf beside one bound", {"type": "integer", "multipleOf": 3, "minimum": -10}, "3000000000003", True),
    ("multipleOf beside one bound", {"type": "integer", "multipleOf": 4, "maximum": 13}, "16", False),
    ("multipleOf beside one bound", {"type": "integer", "multipleOf": 4, "maximum": 13}, "-400", True),
    ("multipleOf beside one bound", {"type": "integer", "multipleOf": 5, "exclusiveMinimum": 10}, "10", False),
    ("multipleOf beside one bound", {"type": "integer", "multipleOf": 5, "exclusiveMinimum": 10}, "15", True),
    ("not multipleOf", {"not": {"multipleOf": 3}}, "-4", True),
    ("not multipleOf", {"not": {"multipleOf": 3}}, "-3", False),
    ("not multipleOf", {"type": "integer", "multipleOf": 2, "not": {"multipleOf": 3}}, "12", False),
    ("not multipleOf", {"type": "integer", "multipleOf": 2, "not": {"multipleOf": 3}}, "14", True),
    ("several patterns", {"patternProperties": {"a*": {"type": "integer"}, "aaa*": {"maximum": 20}}},
     '{"aaaa":31}', False),
    ("several patterns", {"patternProperties": {"a*": {"type": "integer"}, "aaa*": {"maximum": 20}}},
     '{"aaaa":18,"b":3}', True),
    ("properties beside patterns", {"properties": {"foo": {"maxItems": 3}}, "patternProperties": {"f.o": {"minItems": 2}},
                                    "additionalProperties": {"type": "integer"}}, '{"foo":[1]}', False),
    ("properties beside patterns", {"properties": {"foo": {"maxItems": 3}}, "patternProperties": {"f.o": {"minItems": 2}},
                                    "additionalProperties": {"type": "integer"}}, '{"fxo":[1,2],"q":"x"}', False),
    ("properties beside patterns", {"properties": {"foo": {"maxItems": 3}}, "patternProperties": {"f.o": {"minItems": 2}},
                                    "additionalProperties": {"type": "integer"}}, '{"foo":[1,2],"fxo":[1,2],"q":3}', True),
    ("propertyNames", {"propertyNames": {"maxLength": 3}}, '{"abcd":1}', False),
    ("propertyNames", {"propertyNames": {"pattern": "^a+$"}}, '{"aa":1,"a":2}', True),
    ("propertyNames", {"propertyNames": {"pattern": "^a+$"}}, '{"aa":1,"ab":2}', False),
    ("propertyNames", {"allOf": [{"properties": {"abcd": {}}}, {"propertyNames": {"maxLength": 3}}]}, '{"abcd":1}', False),
    ("escaped names", {"properties": {"a\nb": {"type": "number"}}, "required": ["a\nb"]}, '{"a\\nb":1}', True),
    ("escaped names", {"properties": {"a\nb": {"type": "number"}}, "required": ["a\nb"]}, '{"a\\nb":"x"}', False),
    ("contains evaluates items", {"prefixItems": [True], "contains": {"type": "string"}, "unevaluatedItems": False},
     '[1,"a",2]', False),
    ("contains evaluates items", {"prefixItems": [True], "contains": {"type": "string"}, "unevaluatedItems": False},
     '[1,"a","b"]', True),
    ("contains evaluates items", {"contains": {"type": "string"}, "minContains": 0, "unevaluatedItems": False},
     '[1]', False),
    ("two contains", {"allOf": [{"contains": {"multipleOf": 2}}, {"contains": {"multipleOf": 3}}]}, "[2,9]", True),
    ("two contains", {"allOf": [{"contains": {"multipleOf": 2}}, {"contains": {"multipleOf": 3}}]}, "[2,4]", False),
    ("two contains", {"allOf": [{"contains": {"multipleOf": 2}}, {"contains": {"multipleOf": 3}}]}, "[6]", True),
    ("lengths beside a pattern", {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 4},
     '"abcde"', False),
    ("lengths beside a pattern", {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 4},
     '"a"', False),
    ("lengths beside a pattern", {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 4},
     '"abcd"', True),
    ("lengths beside a pattern", {"type": "string", "pattern": "b", "maxLength": 3}, '"a\\"b"', True),
    ("lengths beside a pattern", {"type": "string", "pattern": "b", "maxLength": 3}, '"a\\nb"', True),
    ("lengths beside a pattern", {"type": "string", "pattern": "b", "maxLength": 3}, '"a\\n\\tb"', False),
    ("not a pattern", {"type": "string", "not": {"pattern": "^a"}}, '"ab"', False),
    ("not a pattern", {"type": "string", "not": {"pattern": "^a"}}, '"ba"', True),
    ("two patterns", {"type": "string", "pattern": "a", "allOf": [{"pattern": "b$"}]}, '"xab"', True),
    ("two patterns", {"type": "string", "pattern": "a", "allOf": [{"pattern": "b$"}]}, '"abx"', False),
    ("oneOf overlapping patterns", {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]},
     '"ab"', False),
    ("oneOf overlapping patterns", {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]},
     '"a"', True),
    ("oneOf overlapping patterns", {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]},
     '"axb"', False),
    ("oneOf overlapping patterns", {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]},
     '"ax"', True),
    ("lengths beside a format", {"type": "string", "format": "ipv4", "maxLength": 9}, '"1.2.3.4"', True),
    ("lengths beside a format", {"type": "string", "format": "ipv4", "maxLength": 9}, '"10.20.30.4"', False),
]


# JSON Schema regexes are ECMA-262: '.' never matches U+2028 (Python's re, which jsonschema uses, does)
ECMA_ONLY = {"pattern ECMA dot"}
# rewrites that make a keyword usable at all: raw xgrammar happens to be right on these instances, but
# it is not in general (oneOf is anyOf to it, contains and unevaluated* are unchecked), so without the
# rewrite the refusal layer would have to refuse them
ENABLING = {"oneOf disjoint", "contains with minContains 0", "unevaluatedItems alone", "escaped names"}


def test_enabling_rewrites_are_not_refused():
    for name, schema, _, _ in CASES:
        if name in ENABLING:
            assert find_refusals(schema) == [], name


@pytest.fixture(scope="module")
def grammars():
    from tests.support.grammar import default_grammars

    return default_grammars()


def _ours(grammars, schema, text):
    from tests.support.grammar import accepts
    from typedlm.grammar.spec import make_constraint

    compiled, _ = grammars.compile(make_constraint(json_schema=schema, strict=False, any_whitespace=False))
    return accepts(compiled, text)


def test_grammar_path_with_any_whitespace(grammars):
    from tests.support.grammar import accepts
    from typedlm.grammar.spec import make_constraint

    schema = {"type": "array", "items": {"type": "number"}, "contains": {"not": {"type": "integer"}}}
    compiled, _ = grammars.compile(make_constraint(json_schema=schema, any_whitespace=True))
    assert accepts(compiled, "[ 1 ,\n 2.5 ]") and accepts(compiled, "[2.5]")
    assert not accepts(compiled, "[ 1 , 2 ]") and not accepts(compiled, "[]")


def test_grammar_placeholders_cannot_meet_the_schemas_own_strings(grammars):
    """ebnf.py marks its nodes with placeholder string constants in xgrammar's EBNF; a schema's own
    constant that looks like one stays a literal (each build draws a nonce)."""
    schema = {"anyOf": [{"const": "typedlm-hole-a"}, {"type": "array", "contains": {"const": 1}}]}
    assert _ours(grammars, schema, '"typedlm-hole-a"') and _ours(grammars, schema, "[2,1]")
    assert not _ours(grammars, schema, "[2]") and not _ours(grammars, schema, '"typedlm-hole-b"')


def _raw(grammars, schema, text):
    from tests.support.grammar import accepts

    try:
        compiled = grammars.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                         separators=(",", ":"), strict_mode=False)
    except Exception:
        return None
    return accepts(compiled, text)


@pytest.mark.parametrize("name,schema,text,valid", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rewrite_is_exact(grammars, name, schema, text, valid):
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    # the case is right (where jsonschema can judge it: ECMA regexes and some formats it cannot)
    if name not in ECMA_ONLY and schema.get("format", "date") in checker.checkers:
        assert jsonschema.Draft202012Validator(schema, format_checker=checker).is_valid(json.loads(text)) == valid
    assert _ours(grammars, schema, text) == valid


@pytest.mark.parametrize("name", sorted({c[0] for c in CASES} - ENABLING))
def test_raw_xgrammar_gets_it_wrong_without_the_rewrite(grammars, name):
    verdicts = [(_raw(grammars, schema, text), valid) for n, schema, text, valid in CASES if n == name]
    assert any(raw != valid for raw, valid in verdicts)  # wrong verdict, or no grammar at all


def test_type_split_keeps_each_keyword_on_its_type():
    out = prepare_schema({"maximum": 3, "minLength": 2})
    branches = out["anyOf"]
    numbers = [b for b in branches if b.get("type") == "number"]
    strings = [b for b in branches if b.get("type") == "string"]
    assert len(numbers) == len(strings) == 1
    assert numbers[0]["maximum"] == 3 and "minLength" not in numbers[0]
    assert strings[0]["minLength"] == 2 and "maximum" not in strings[0]


def test_enum_filter_validates_against_the_whole_subschema():
    assert prepare_schema({"enum": [1, 2, 3], "not": {"const": 2}}) == {"enum": [1, 3]}


def test_pattern_rewrite():
    assert rewrite_pattern("^ab$") == "(ab)"
    assert rewrite_pattern("ab") == r"[\s\S]*(ab)[\s\S]*"
    assert rewrite_pattern("^a.") == r"(a[^\n\r\u2028\u2029])[\s\S]*"
    assert rewrite_pattern("[.]") == r"[\s\S]*([.])[\s\S]*"
    assert rewrite_pattern("^(ab+)?c(d)??$") == "((ab+){0,1}c(d){0,1})"
    assert rewrite_pattern("^a|b$") == r"((a)[\s\S]*)|([\s\S]*(b))"  # each branch its own anchors
    assert rewrite_pattern("^(a|b|a{1,2})$") == "((a|b|a{1,2}))"  # the grammar gets its automaton
    for bad, why in (("(?=a)", "lookaround"), ("(?<!a)b", "lookaround"), (r"\bx", "word boundary"),
                     (r"\p{L}", "property"), ("a^b", "anchor"), ("(^a|b)", "anchor"), (r"(a)\1", "backreference"),
                     ("(?<n>a)", "named groups"), ("[]", "escape or class")):
        assert rewrite_pattern(bad) is None, bad
        assert why in pattern_problem(bad), bad


@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"properties": {"a": {"contains": {"type": "string"}, "minContains": 5000}}}, "contains", "/properties/a"),
    ({"type": "string", "pattern": "(?=a)"}, "pattern", "/pattern"),
    ({"type": "string", "pattern": "^(?!x)"}, "pattern", "/pattern"),
    ({"type": "string", "pattern": "a", "maxLength": 3000}, "maxLength", ""),
    ({"type": "string", "format": "idn-email", "maxLength": 30}, "maxLength", ""),
    ({"not": {"type": "string", "format": "idn-email"}}, "not", "/not"),
    ({"$ref": "http://example.com/x.json"}, "$ref", "/$ref"),
    ({"items": {"$dynamicRef": "#x"}}, "$dynamicRef", "/items/$dynamicRef"),
    ({"type": "object", "patternProperties": {"a": {}, "b": {}, "c": {}, "d": {}, "e": {}}}, "patternProperties",
     "/patternProperties"),
    ({"type": "object", "propertyNames": {"pattern": "^a"}, "maxProperties": 2}, "maxProperties", ""),
    ({"type": "object", "properties": {"a": {}}, "patternProperties": {"^b": {"type": "integer"}},
      "minProperties": 1}, "minProperties", ""),
    ({"type": "array", "uniqueItems": True, "contains": {"type": "integer"}}, "uniqueItems", "/uniqueItems"),
    ({"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}], "unevaluatedProperties": False},
     "unevaluatedProperties", "/unevaluatedProperties"),
    ({"type": "number", "multipleOf": 0.5}, "multipleOf", "/multipleOf"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "contentMediaType": "application/json"},
     "contentMediaType", "/contentMediaType"),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "items": [{}, {"pattern": "(?=a)"}]},
     "pattern", "/items/1/pattern"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "items": [{}], "additionalItems": {"uniqueItems": True, "contains": {"type": "integer"}}},
     "uniqueItems", "/additionalItems/uniqueItems"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"a": 3}}, "(schema)", "/dependencies/a"),
])
def test_refusals_name_keyword_and_pointer(schema, keyword, pointer):
    refusals = find_refusals(schema)
    assert refusals and refusals[0].keyword == keyword and refusals[0].pointer == pointer
    with pytest.raises(GrammarCompileError) as e:
        prepare_schema(schema)
    assert e.value.keyword == keyword and e.value.pointer == (pointer or "/")
    assert f"keyword '{keyword}' at '{pointer or '/'}' is not enforced" in str(e.value)
    assert prepare_schema(schema, lenient=True) == schema  # lenient compiles the schema as given


@pytest.mark.parametrize("schema", [False, {"allOf": [{"type": "string"}, {"type": "integer"}]},
                                    {"enum": [1], "const": 2}, {"not": {}}, {"minimum": 3, "maximum": 2, "type": "number"}])
def test_empty_schema_is_its_own_error(schema):
    from typedlm.grammar.spec import make_constraint

    with pytest.raises(EmptySchemaError):
        prepare_schema(make_constraint(json_schema=schema).value)


def test_remote_ref_resolves_only_from_the_registry():
    import referencing
    from referencing.jsonschema import DRAFT202012

    schema = {"$ref": "http://localhost:1234/int.json"}
    assert find_refusals(schema)[0].keyword == "$ref"
    reg = referencing.Registry().with_resource("http://localhost:1234/int.json",
                                                DRAFT202012.create_resource({"type": "integer"}))
    assert prepare_schema(schema, registry=reg) == {"type": "integer"}


def test_recursive_ref_becomes_a_definition(grammars):
    schema = {"type": "object", "properties": {"child": {"$ref": "#"}}, "additionalProperties": False}
    out = prepare_schema(schema)
    assert "$defs" in out
    assert _ours(grammars, schema, '{"child":{"child":{}}}')
    assert not _ours(grammars, schema, '{"child":{"x":1}}')


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values=st.lists(st.text("ab\u00e9", max_size=3), min_size=1, max_size=4),
       texts=st.lists(st.text("ab\u00e9c", max_size=4), min_size=8, max_size=8))
def test_not_strings_regex_is_the_exact_complement(values, texts):
    import re

    from typedlm.grammar.schema.algebra import not_strings as _not_strings

    rx = _not_strings(values)
    for t in texts + values:
        assert (re.fullmatch(rx, t) is not None) == (t not in values), (values, t)


_BOUND = st.one_of(st.integers(-1000, 1000), st.floats(-1000, 1000, allow_nan=False).map(lambda x: round(x, 3)),
                   st.sampled_from([0, 0.0, 0.1, -0.1, 1e-7, 9223372036854775807]))
_NUMBER = st.builds(lambda sign, whole, frac: sign + whole + frac, st.sampled_from(["", "-"]),
                    st.one_of(st.just("0"), st.integers(1, 10**20).map(str)),
                    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=22).map(lambda f: "." + f)))


@settings(max_examples=60, deadline=None)
@given(lo=st.one_of(st.none(), st.tuples(_BOUND, st.booleans())), hi=st.tuples(_BOUND, st.booleans()),
       texts=st.lists(_NUMBER, min_size=1, max_size=20), flip=st.booleans())
def test_number_range_agrees_with_jsonschema(lo, hi, texts, flip):
    """A number between bounds (numbers.range_spec, through the compiled grammar) against jsonschema
    (Python's reading of the text: doubles rounded): never looser; stricter only where the text needs
    more digits than a double holds."""
    import xgrammar as xgr

    from typedlm.grammar.schema.ebnf import to_ebnf
    from typedlm.grammar.schema.ir import needs_grammar

    lo, hi = (hi, lo) if flip else (lo, hi)
    schema = {"type": "number"}
    for b, (inc, exc) in ((lo, ("minimum", "exclusiveMinimum")), (hi, ("maximum", "exclusiveMaximum"))):
        if b is not None:
            schema[exc if b[1] else inc] = b[0]
    try:
        core = prepare_schema(schema)
    except EmptySchemaError:
        return
    if core == {"anyOf": []}:  # no number left: stricter only where a bound needs more digits than a double holds
        assert any(b is not None and len(str(abs(b[0])).replace(".", "")) > 15 for b in (lo, hi)), schema
        return
    if not needs_grammar(core):  # one value left (lo == hi): an enum
        assert "enum" in core or "const" in core, core
        return
    grammar = xgr.Grammar.from_ebnf(to_ebnf(core, any_whitespace=False, max_whitespace=None, strict=False))
    verdicts = [(xgr.testing._is_grammar_accept_string(grammar, t), t) for t in texts]
    check = jsonschema.Draft202012Validator(schema)
    for ours, text in verdicts:
        valid = check.is_valid(json.loads(text))
        assert not ours or valid, ("looser than the schema", schema, text)
        assert ours or not valid or len(text.lstrip("-").replace(".", "")) > 15, ("stricter", schema, text)

