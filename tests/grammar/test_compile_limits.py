"""The compile's time limits: the normalizer's own budget ends in a refusal named ``(time limit)`` (never a
partial core form), on every engine choice."""

import pytest

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
