"""Shared-prefix ``decide_many``: the prompt part before the fence is computed once, the contexts are
packed side by side on its KV, and every decision equals its own ``decide`` within the tolerance."""

import dataclasses

import pytest

from typedlm.decide import TOLERANCE, decide, decide_many, presets
from typedlm.decide.api import plan_for
from typedlm.decide.prompt import nonce_for, prompt_ids
from typedlm.decide.passes import shared_prefix
from typedlm.engine import Engine

CONTEXTS = ["My card was charged twice this month and I want my money back.",
            "The app crashes every time I open settings on Android 14.",
            "Could you add dark mode? Otherwise I love the product.",
            "URGENT: our whole team is locked out since this morning, production is down."]


@dataclasses.dataclass
class _Counting:
    """The tiny engine whose forwards are recorded as (input tokens, had a cache)."""

    engine: Engine
    calls: list


def _counting(tiny) -> _Counting:
    calls: list = []
    real = tiny.runner.forward

    def forward(input_ids, cache=None, **kwargs):
        calls.append((input_ids.shape[-1], cache is not None))
        return real(input_ids, cache, **kwargs)

    return _Counting(dataclasses.replace(tiny, runner=tiny.runner.wrapped(forward)), calls)


def _max_diff(a, b):
    return max(abs(x - y) for n in a.fields for x, y in zip(a.fields[n].log_scores.values(),
                                                            b.fields[n].log_scores.values()))


@pytest.mark.parametrize("packing", ["packed", "fused"])
@pytest.mark.parametrize("preset", ["support_triage", "content_moderation"])
def test_shared_prefix_decide_many_equals_decide(tiny, preset, packing):
    schema = presets.load(preset)["schema"]
    many = decide_many(schema, CONTEXTS, engine=tiny, packing=packing, prior="none")
    for ctx, d in zip(CONTEXTS, many):
        ref = decide(schema, ctx, engine=tiny, packing="expand", max_rows=1, prior="none")  # one row per forward
        assert d.usage["shared_prefix_tokens"] > 0 and ref.usage["shared_prefix_tokens"] == 0
        assert d.value_dict() == ref.value_dict()
        assert _max_diff(d, ref) <= TOLERANCE


@pytest.mark.parametrize("packing", ["packed", "fused"])
def test_prefix_kv_is_computed_once(tiny, packing, no_prefix_cache):  # counts the prefix's forwards
    schema = presets.load("support_triage")["schema"]
    plan = plan_for(schema, tiny)
    ids = [prompt_ids(tiny, plan, c) for c in CONTEXTS]
    P = shared_prefix(ids)
    eng = _counting(tiny)
    many = decide_many(schema, CONTEXTS, engine=eng.engine, packing=packing, prior="none")
    tree = many[0].usage["scored_tokens"]  # the row tree's tokens, fed once per context
    own = sum(len(i) - P + tree for i in ids)  # each context's own prompt tokens + its rows
    fed = sum(n for n, _ in eng.calls)
    assert fed == P + own, eng.calls  # the prefix's P tokens are fed once, not once per context
    assert fed < sum(len(i) for i in ids)  # less than prefilling every prompt alone, rows not even counted
    if packing == "packed":  # one prefix prefill without a cache, then passes on it
        assert eng.calls[0] == (P, False) and all(c for _, c in eng.calls[1:])
    else:
        assert not eng.calls[0][1] and eng.calls[0][0] > P
    assert len(eng.calls) < len(CONTEXTS)  # contexts share passes
    assert all(d.usage["shared_prefix_tokens"] == P for d in many)


def test_shared_prefix_is_everything_before_the_fence(tiny):
    plan = plan_for(presets.load("support_triage")["schema"], tiny)
    ids = [prompt_ids(tiny, plan, c) for c in CONTEXTS]
    text = tiny.tokenizer.decode(ids[0][: shared_prefix(ids)])
    last_question = plan.schema.fields[-1].name
    assert f'"{last_question}"' in text  # every question is in the shared part
    assert nonce_for(CONTEXTS[0]) not in text and CONTEXTS[0][:20] not in text  # nothing per-context


def test_contexts_that_do_not_fit_together_are_split_and_still_equal(tiny):
    schema = presets.load("invoice_routing")["schema"]
    eng = _counting(tiny)
    small = decide_many(schema, CONTEXTS, engine=eng.engine, packing="packed", prior="none", budget_bytes=6_000_000)
    calls = len(eng.calls)
    big = decide_many(schema, CONTEXTS, engine=tiny, packing="packed", prior="none")
    assert calls > 2  # the budget split the contexts over several passes
    for a, b in zip(small, big):
        assert a.value_dict() == b.value_dict() and _max_diff(a, b) <= TOLERANCE
