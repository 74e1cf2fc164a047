"""Each constraint kind on the tiny random model, compile errors, refusals, cache, kill switch."""

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typing import Annotated

from pydantic import BaseModel, Field

from typedlm import config
from typedlm.generate import generate
from typedlm.errors import ConstraintError, GrammarCompileError
from typedlm.grammar import GrammarDisabled, make_constraint
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.controller import accepts_text


class Item(BaseModel):
    name: Annotated[str, Field(max_length=10)]
    count: Annotated[int, Field(ge=0, le=1000)]
    ok: bool


@pytest.mark.parametrize("pattern", [
    r"[A-Z]{3}-\d{4}",
    r"(cat|dog)s? \d{1,5}",
    r"a.c",
    r"^(x|yz){1,6}$",
    r"\w{2}\s[0-9a-f]{4}",
])
def test_regex_output_fully_matches(tiny, pattern):
    py = pattern.strip("^$")
    for seed in range(3):
        r = generate("x", engine=tiny, regex=pattern, seed=seed, max_tokens=64)
        assert r.finish_reason == "stop", r
        assert re.fullmatch(py, r.text), (pattern, r.text)


@pytest.mark.parametrize("pattern", [r"(?=a)a", r"(a)\1", r"\bfoo", r"[a-"])
def test_unsupported_or_bad_regex_is_a_compile_error(tiny, pattern):
    with pytest.raises(GrammarCompileError, match="regex"):
        generate("x", engine=tiny, regex=pattern)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12),
                min_size=1, max_size=4, unique=True), st.integers(0, 2**16))
def test_choice_comes_out_exactly(tiny, choices, seed):
    r = generate("x", engine=tiny, choice=choices, seed=seed, max_tokens=128)
    if r.finish_reason == "error":
        # only allowed when no token sequence can spell some choice (e.g. a byte the vocab lacks)
        assert "cannot produce" in r.error
        assert any(tiny.decode(tiny.tokenizer.encode(c, add_special_tokens=False)) != c for c in choices)
        return
    assert r.finish_reason == "stop"
    assert r.text in choices


def test_unspellable_text_is_an_error_not_an_empty_answer(tiny):
    # SmolLM2's vocabulary has no byte token for 0xF1, so U+40000 cannot be produced
    r = generate("x", engine=tiny, choice=["\U00040000"])
    assert r.finish_reason == "error" and "cannot produce" in r.error


def test_choice_with_quotes_backslashes_newlines_unicode(tiny):
    choices = ['say "hi"', "back\\slash", "two\nlines", "naïve — 東京 🙂", "tab\tend"]
    seen = set()
    for seed in range(12):
        r = generate("x", engine=tiny, choice=choices, seed=seed)
        assert r.text in choices
        seen.add(r.text)
    assert len(seen) >= 2


@pytest.mark.parametrize("bad, msg", [([], "empty"), (["a", "a"], "repeats"), (["a", ""], "empty string"),
                                      ("abc", "list of strings")])
def test_bad_choice_lists(bad, msg):
    with pytest.raises(GrammarCompileError, match=msg):
        make_constraint(choice=bad)


def test_ebnf_grammar(tiny):
    g = 'root ::= greeting " " name\ngreeting ::= "hi" | "hello"\nname ::= [a-z] [a-z]? [a-z]? "!"'
    for seed in range(4):
        r = generate("x", engine=tiny, grammar=g, seed=seed, max_tokens=40)
        assert re.fullmatch(r"(hi|hello) [a-z]{1,3}!", r.text), r.text


def test_lark_grammar(tiny):
    lark = 'start: pair ("," pair)? ("," pair)?\npair: KEY "=" NUM\nKEY: /[a-z]{1,3}/\nNUM: /[0-9]{1,2}/\n'
    for seed in range(4):
        r = generate("x", engine=tiny, lark=lark, seed=seed, max_tokens=60)
        assert r.finish_reason == "stop"
        assert re.fullmatch(r"[a-z]{1,3}=[0-9]{1,2}(,[a-z]{1,3}=[0-9]{1,2}){0,2}", r.text), r.text


def test_bad_grammars_are_compile_errors(tiny):
    with pytest.raises(GrammarCompileError, match="grammar does not compile"):
        generate("x", engine=tiny, grammar="root ::= undefined_rule")
    with pytest.raises(GrammarCompileError, match="lark"):
        generate("x", engine=tiny, lark="start: ((")


def test_structural_tag(tiny):
    tag = {"type": "structural_tag", "format": {
        "type": "tag", "begin": "<answer>", "end": "</answer>",
        "content": {"type": "json_schema", "json_schema": {"type": "object", "properties": {
            "v": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["v"],
            "additionalProperties": False}}}}
    for seed in range(3):
        r = generate("x", engine=tiny, structural_tag=tag, seed=seed, max_tokens=200)
        m = re.fullmatch(r"<answer>(.*)</answer>", r.text, re.S)
        assert m, r.text
        assert 0 <= json.loads(m.group(1))["v"] <= 9


def test_structural_tag_schema_goes_through_refusal(tiny):
    tag = {"type": "structural_tag", "format": {"type": "json_schema",
                                                "json_schema": {"type": "array", "uniqueItems": True, "contains": {"type": "integer"}}}}
    with pytest.raises(GrammarCompileError, match="uniqueItems") as e:
        generate("x", engine=tiny, structural_tag=tag)
    assert e.value.pointer.startswith("/format/json_schema")


def test_structural_tag_schema_that_needs_our_grammar(tiny):
    """contains is a grammar of typedlm's own (grammar/schema/ebnf.py): inside a tag it becomes a grammar format."""
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
              "contains": {"const": 7}, "minContains": 2, "maxItems": 4}
    tag = {"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "end": "</a>",
                                                "content": {"type": "json_schema", "json_schema": schema}}}
    for seed in range(3):
        r = generate("x", engine=tiny, structural_tag=tag, seed=seed, max_tokens=60)
        m = re.fullmatch(r"<a>(.*)</a>", r.text, re.S)
        assert m, r.text
        jsonschema.validate(json.loads(m.group(1)), schema)


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "contains": {"const": 7},
     "minContains": 1, "maxContains": 2, "maxItems": 4},
    {"type": "object", "properties": {"x_a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["x_a"],
     "patternProperties": {"^x_[ab]$": {"type": "integer", "maximum": 5}, "^y_[ab]$": {"type": "boolean"}},
     "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "long": {}},
     "propertyNames": {"maxLength": 2}, "additionalProperties": False},
])
def test_grammars_of_our_own_generate_valid_json(tiny, schema):
    """Schemas whose grammar typedlm writes itself (grammar/schema/ebnf.py): the tiny model's output
    under them validates, whatever the random weights want."""
    for seed in range(3):
        r = generate("x", engine=tiny, json_schema=schema, seed=seed, max_tokens=80, any_whitespace=False)
        assert r.finish_reason == "stop", r.text
        jsonschema.validate(json.loads(r.text), schema)


def test_json_schema_from_pydantic_dict_and_string(tiny):
    schema = Item.model_json_schema()
    for spec in (Item, schema, json.dumps(schema)):
        r = generate("x", engine=tiny, json_schema=spec, seed=4, max_tokens=300)
        assert r.schema_valid, r.schema_errors
        Item.model_validate_json(r.text)


def test_json_object(tiny):
    stopped = 0
    for seed in range(4):
        r = generate("x", engine=tiny, json_object=True, seed=seed, max_tokens=200, any_whitespace=False)
        assert r.finish_reason in ("stop", "length") and r.constraint == "json_object"
        if r.finish_reason == "length":  # cut at the limit: a JSON-object prefix, not yet parseable
            assert r.completion_tokens == 200 and r.text.startswith("{") and r.schema_valid is False
            continue
        stopped += 1
        assert isinstance(json.loads(r.text), dict) and r.schema_valid, r.text
    assert stopped, "no run finished: the test checked nothing"


def test_property_order_follows_the_schema(tiny):
    schema = {"type": "object", "properties": {"zeta": {"type": "boolean"}, "alpha": {"type": "boolean"}},
              "required": ["zeta", "alpha"], "additionalProperties": False}
    r = generate("x", engine=tiny, json_schema=schema, seed=0, any_whitespace=False)
    assert list(json.loads(r.text)) == ["zeta", "alpha"]


def test_two_constraints_name_both():
    with pytest.raises(ConstraintError, match="regex and choice"):
        make_constraint(regex="a", choice=["a"])
    with pytest.raises(ConstraintError, match="json_object and json_schema"):
        make_constraint(json_object=True, json_schema={})


@pytest.mark.parametrize("kw", [dict(temperature=-1), dict(top_p=0), dict(top_k=-1), dict(max_tokens=0),
                                dict(repetition_penalty=0), dict(stop=[""])])
def test_bad_sampling_values(tiny, kw):
    with pytest.raises(ConstraintError):
        generate("x", engine=tiny, **kw)


REFUSED = [
    ({"not": {"type": "string", "format": "idn-email"}}, "not", "/not"),
    ({"type": "object", "properties": {"a": {"if": {"type": "string", "format": "idn-email"}, "else": {"minLength": 3}}}}, "if",
     "/properties/a/if"),
    ({"type": "array", "uniqueItems": True, "contains": {"type": "integer"}}, "uniqueItems", "/uniqueItems"),
    ({"type": "array", "contains": {"const": 1}, "minContains": 5000}, "contains", "/"),
    ({"type": "number", "multipleOf": 0.5}, "multipleOf", "/multipleOf"),
    ({"oneOf": [{"type": "string", "format": "idn-email"}, {"type": "string", "format": "uuid"}]}, "oneOf", "/oneOf"),
    ({"type": "string", "pattern": "^(?!x)"}, "pattern", "/pattern"),
    ({"$ref": "http://example.com/s.json"}, "$ref", "/$ref"),
    ({"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}], "unevaluatedProperties": False},
     "unevaluatedProperties", "/unevaluatedProperties"),
]
# dependentRequired, {"maximum": 3}, required names outside properties, integer multipleOf, a lone
# unevaluatedProperties and not/if/oneOf over patterns are rewritten exactly now: tests/grammar/schema/test_rewrites.py


@pytest.mark.parametrize("schema, keyword, pointer", REFUSED)
def test_unenforceable_keywords_are_refused_with_pointer(tiny, schema, keyword, pointer):
    with pytest.raises(GrammarCompileError) as e:
        generate("x", engine=tiny, json_schema=schema)
    assert e.value.keyword == keyword
    assert e.value.pointer == pointer
    assert keyword in str(e.value) and pointer in str(e.value)


def test_property_count_beside_property_names_on_llguidance_refused_by_xgrammar(tiny):
    """xgrammar's grammar cannot count properties beside propertyNames (a named refusal); llguidance can, so the
    default engine (handoff) serves the schema on llguidance exactly."""
    schema = {"type": "object", "propertyNames": {"maxLength": 2}, "maxProperties": 3}
    with pytest.raises(GrammarCompileError) as e:
        Grammars(tiny.grammars.tokenizer_info, engine="xgrammar").compile(make_constraint(json_schema=schema,
                                                                                          strict=False))
    assert (e.value.keyword, e.value.pointer) == ("maxProperties", "/")
    compiled, _ = tiny.grammars.compile(make_constraint(json_schema=schema, strict=False))
    texts = ['{}', '{"a": 1, "b": 2, "c": 3}', '{"a": 1, "b": 2, "c": 3, "d": 4}', '{"abc": 1}']
    assert [accepts_text(compiled, t) for t in texts] == [True, True, False, False]


def test_lenient_compiles_and_reports_validity(tiny):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9,
                                                     "not": {"anyOf": [{"enum": [0, 1, 2, 3, 4, 5, 6, 7]},
                                                                       {"type": "string", "format": "idn-email"}]}}},
              "required": ["n"]}
    verdicts = []
    for seed in range(6):
        r = generate("x", engine=tiny, json_schema=schema, lenient=True, seed=seed, any_whitespace=False)
        expected = jsonschema.Draft202012Validator(schema).is_valid(json.loads(r.text))
        assert r.schema_valid is expected
        verdicts.append(expected)
    assert False in verdicts  # the ignored keyword really was not enforced, and we said so


@pytest.mark.parametrize("bad", ['{"type": ', "[1, 2]", False])
def test_bad_schema_values(bad):
    with pytest.raises(GrammarCompileError):
        make_constraint(json_schema=bad)


def test_compile_cache_counts_hits(tiny):
    schema = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 3}}, "required": ["q"]}
    before = tiny.grammars.stats.as_dict()
    _, t_cold = tiny.grammars.compile(make_constraint(json_schema=schema))
    _, t_warm = tiny.grammars.compile(make_constraint(json_schema=json.dumps(schema)))
    after = tiny.grammars.stats.as_dict()
    assert after["misses"] == before["misses"] + 1
    assert after["hits"] == before["hits"] + 1
    assert t_warm < t_cold


def test_kill_switch(tiny, monkeypatch):
    from typedlm.engine import grammar_options

    monkeypatch.setattr(config, "_CURRENT", [config.resolve(env={"TYPEDLM_GRAMMAR": "0"})])
    assert grammar_options(config.settings())["enabled"] is False  # what load_engine hands the engine's Grammars
    monkeypatch.setattr(tiny.grammars, "enabled", False)
    with pytest.raises(GrammarDisabled, match="TYPEDLM_GRAMMAR=0"):
        generate("x", engine=tiny, json_object=True)
    r = generate("x", engine=tiny, max_tokens=3)  # free text still works
    assert r.constraint is None and len(r.token_ids) <= 3
