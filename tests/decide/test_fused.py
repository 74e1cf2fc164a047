"""`fused` packing: the prompt and every row in one forward gives the same scores as prefill + packed."""

import pytest

from typedlm.decide import TOLERANCE, decide, decide_many, presets
from typedlm.decide.passes import resolve_packing
from typedlm.errors import TypedLMError


@pytest.mark.parametrize("preset", ["support_triage", "content_moderation"])
def test_fused_equals_packed(tiny, preset):
    p = presets.load(preset)
    ctx = p["examples"][0]
    # prior "none": the scores as scored (the prior step centres a multi field's options, which on a random
    # model puts some within the fp32 drift of a tie: rescored one row at a time, i.e. more passes)
    a = decide(p["schema"], ctx, engine=tiny, packing="packed", prior="none")
    b = decide(p["schema"], ctx, engine=tiny, packing="fused", prior="none")
    assert b.usage["packing"] == "fused" and b.usage["passes"] == 1
    assert a.value_dict() == b.value_dict()
    for name in a.fields:
        for x, y in zip(a.fields[name].log_scores.values(), b.fields[name].log_scores.values()):
            assert abs(x - y) <= TOLERANCE


def test_fused_falls_back_to_packed_when_rows_do_not_fit_one_pass(tiny):
    p = presets.load("support_triage")
    ctx = p["examples"][0]
    d = decide(p["schema"], ctx, engine=tiny, packing="fused", budget_bytes=1)
    assert d.usage["packing"] == "packed" and d.usage["passes"] > 1
    ref = decide(p["schema"], ctx, engine=tiny, packing="packed")
    assert d.value_dict() == ref.value_dict()


def test_decide_many_fused_matches_decide(tiny):
    p = presets.load("invoice_routing")
    many = decide_many(p["schema"], p["examples"], engine=tiny, packing="fused")
    for ctx, d in zip(p["examples"], many):
        assert d.value_dict() == decide(p["schema"], ctx, engine=tiny, packing="packed").value_dict()


def test_auto_packing(tiny):
    assert resolve_packing("auto", tiny) == "packed"  # CPU: fused measured 8 % slower (ARCHITECTURE.md)
    with pytest.raises(TypedLMError, match="packing"):
        resolve_packing("sideways", tiny)
