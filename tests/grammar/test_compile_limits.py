"""The compile's limits: the normalizer's own budget ends in a refusal named ``(time limit)`` (never a
partial core form), on every engine choice; an EBNF over the size cap is refused by name."""

import pytest

from typedlm.config import MAX_GRAMMAR_BYTES, Settings
from typedlm.engine import grammar_options
from typedlm.errors import GrammarTooLarge, TypedLMError
from typedlm.grammar.compiler import Grammars
from typedlm.grammar.schema.rewrites import NormalizeTimeLimit
from typedlm.grammar.spec import make_constraint

SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"}}, "required": ["a"]}


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance", "auto"])
def test_the_normalizer_budget_is_a_named_refusal(tiny, engine):
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    with pytest.raises(NormalizeTimeLimit) as e:
        Grammars(tiny.grammars.tokenizer_info, engine=engine, normalize_s=0.0).compile(c)
    assert e.value.keyword == "(time limit)" and e.value.pointer == "/"
    compiled, _ = Grammars(tiny.grammars.tokenizer_info, engine=engine).compile(c)  # a budget it fits in
    assert compiled.engine in ("xgrammar", "llguidance")


def test_a_grammar_over_the_size_cap_is_a_named_refusal(tiny):
    """xgrammar's EBNF past ``max_grammar_bytes``: GrammarTooLarge naming both sizes, before the compile; under
    the cap the same schema compiles."""
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string", "maxLength": 8} for i in range(40)}}
    c = make_constraint(json_schema=schema, any_whitespace=False)
    with pytest.raises(GrammarTooLarge) as e:
        Grammars(tiny.grammars.tokenizer_info, engine="xgrammar", max_grammar_bytes=2_000).compile(c)
    assert isinstance(e.value, TypedLMError) and e.value.cap == 2_000 and e.value.size > 2_000
    assert f"{e.value.size:,} bytes" in str(e.value) and "2,000 bytes" in str(e.value)
    assert e.value.keyword == "(grammar size)"
    compiled, _ = Grammars(tiny.grammars.tokenizer_info, engine="xgrammar", max_grammar_bytes=e.value.size).compile(c)
    assert compiled.engine == "xgrammar"
    with pytest.raises(GrammarTooLarge):  # a grammar given as EBNF is measured the same way
        Grammars(tiny.grammars.tokenizer_info, engine="xgrammar", max_grammar_bytes=20).compile(
            make_constraint(grammar='root ::= "a" | "bb" | "ccc" | "dddd" | "eeeee"'))


def test_the_size_cap_is_a_setting():
    assert Settings().max_grammar_bytes == MAX_GRAMMAR_BYTES
    assert grammar_options(Settings().replace(max_grammar_bytes=123))["max_grammar_bytes"] == 123
