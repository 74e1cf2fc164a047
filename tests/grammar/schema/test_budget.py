"""A rewrite that would meet too many branch pairs (``algebra.MAX_MEETS``) stops the normalization with a
refusal naming the keyword, in a bounded time, instead of running until the compile time limit."""

import pytest

from typedlm.errors import GrammarCompileError
from typedlm.grammar.schema import algebra, find_refusals, prepare_schema

# four overlapping oneOf branches, each complemented by the others: hundreds of branch pairs met
SCHEMA = {"oneOf": [{"type": "object", "properties": {k: {"type": "integer", "minimum": i}}, "required": [k]}
                    for i, k in enumerate("abcd")]}


def test_the_schema_compiles_under_the_default_budget():
    assert prepare_schema(SCHEMA, automata=False)


def test_past_the_budget_the_keyword_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(algebra, "MAX_MEETS", 20)
    with pytest.raises(GrammarCompileError, match="more than 20 intersections") as e:
        prepare_schema(SCHEMA, automata=False)
    assert e.value.keyword == "oneOf"
    assert [r.keyword for r in find_refusals(SCHEMA)] == ["oneOf"]
