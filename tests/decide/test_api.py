"""decide / decide_many on the tiny random model: mechanics, parity, chunking, OOM, results, baseline."""

import dataclasses
import json
import math
from typing import Literal

import pytest
import torch
from pydantic import BaseModel, Field

from typedlm.decide import TOLERANCE, decide, decide_many, naive_generate, naive_json_schema, plan_for
from typedlm.decide.result import DECISION_KEYS, FIELD_KEYS
from typedlm.engine import Engine
from typedlm.errors import TypedLMError

SCHEMA = {"description": "Triage a support ticket.", "fields": {
    "priority": {"type": "enum", "description": "How urgent?", "choices": ["low", "medium", "high", "critical"],
                 "ordered": True},
    "spam": {"type": "boolean", "description": "Is it spam?"},
    "topic": {"type": "enum", "description": "Topic?",
              "choices": {"billing issue": "money", "billing question": "q", "login": "auth"}},
    "tags": {"type": "multi", "description": "Which apply?", "choices": ["refund", "bug", "feature request"]}}}
CTX = "My card was charged twice this month and I want my money back."


def _max_diff(a, b):
    return max(abs(x - y) for n in a.fields for x, y in zip(a.fields[n].log_scores.values(),
                                                            b.fields[n].log_scores.values()))


@pytest.mark.parametrize("scoring", ["labels", "slots"])
def test_parity_batched_vs_one_row_at_a_time(tiny, scoring):
    ref = decide(SCHEMA, CTX, engine=tiny, scoring=scoring, packing="expand", max_rows=1)
    assert ref.usage["passes"] == ref.usage["rows"]
    for kw in ({"packing": "packed"}, {"packing": "expand"}, {"packing": "packed", "budget_bytes": 1}):
        d = decide(SCHEMA, CTX, engine=tiny, scoring=scoring, **kw)
        assert d.value_dict() == ref.value_dict()
        assert _max_diff(d, ref) <= TOLERANCE
    assert decide(SCHEMA, CTX, engine=tiny, scoring=scoring).usage["passes"] == 1
    assert decide(SCHEMA, CTX, engine=tiny, scoring=scoring, budget_bytes=1).usage["passes"] == ref.usage["rows"]


def test_decision_contract(tiny):
    d = decide(SCHEMA, CTX, engine=tiny)
    out = json.loads(json.dumps(d.to_dict()))
    assert tuple(out) == DECISION_KEYS
    assert set(out["timings"]) == {"compile", "prefill", "scoring", "total"}
    assert out["usage"]["prompt_tokens"] > 0 and out["usage"]["oom_retries"] == 0
    for name, f in out["fields"].items():
        assert tuple(f) == FIELD_KEYS
        assert len(f["alternatives"]) <= 3 and f["reason"] is None
        assert 0 < f["legal_mass"] <= 1
    assert set(out["fields"]["spam"]["probabilities"]) == {"true", "false"}
    assert isinstance(out["value"]["spam"], bool)
    for name in ("priority", "spam", "topic"):
        f = out["fields"][name]
        assert abs(sum(f["probabilities"].values()) - 1) < 1e-9
        assert f["probability"] == max(f["probabilities"].values())
        # the reported value is the most probable option, and the top-level value agrees with it
        top = max(f["probabilities"], key=f["probabilities"].get)
        assert str(f["value"]).lower() == top.lower() and out["value"][name] == f["value"]
    tags = out["fields"]["tags"]
    assert tags["probability"] is None and set(tags["probabilities"]) == {"refund", "bug", "feature request"}
    assert set(tags["value"]) <= set(tags["probabilities"])
    assert d.fields["tags"].count_probabilities and abs(sum(d.fields["tags"].count_probabilities.values()) - 1) < 1e-9
    legal = {n: f.log_legal_mass for n, f in d.fields.items()}
    assert all(v <= 0 for v in legal.values())


def test_none_of_above_and_abstention(tiny):
    d = decide(SCHEMA, CTX, engine=tiny, allow_none_of_above=True)
    for name in ("priority", "topic"):
        f = d.fields[name]
        assert "none_of_above" in f.probabilities and abs(sum(f.probabilities.values()) - 1) < 1e-9
        top = max(f.probabilities, key=f.probabilities.get)
        assert (f.reason == "none_of_above") == (top == "none_of_above")
        assert (f.value is None) == (top == "none_of_above")
    assert "none_of_above" not in d.fields["spam"].probabilities
    a = decide(SCHEMA, CTX, engine=tiny, abstain_below_margin=0.9)
    for f in a.fields.values():
        assert (f.reason == "abstain") == (f.margin < 0.9)
        assert (f.value is None) == (f.reason == "abstain")
    with pytest.raises(TypedLMError, match="abstain_below_margin"):
        decide(SCHEMA, CTX, engine=tiny, abstain_below_margin=2)


class Ticket(BaseModel):
    spam: bool = Field(description="Is it spam?")
    priority: Literal["low", "high"] = Field(description="How urgent?")
    topic: Literal["billing", "login"] | None = Field(None, description="Topic?")
    tags: list[Literal["refund", "bug"]] = Field(description="Which apply?")


def test_pydantic_in_and_out(tiny):
    d = decide(Ticket, CTX, engine=tiny, abstain_below_margin=1.0)
    assert isinstance(d.value, Ticket)
    assert d.value.topic is None and d.fields["topic"].reason == "abstain"  # nullable: may abstain
    assert d.fields["spam"].reason is None and d.value.spam == d.fields["spam"].value  # not nullable: never abstains
    assert d.value.priority in ("low", "high") and set(d.value.tags) <= {"refund", "bug"}


def test_decide_many_shares_the_plan_and_matches_decide(tiny):
    ctxs = [CTX, "The login page shows error 500 since this morning."]
    many = decide_many(SCHEMA, ctxs, engine=tiny)
    assert len(many) == 2 and many[1].timings["compile"] == 0.0
    assert many[0].timings["prefill"] == many[1].timings["prefill"]  # one batched prefill, shared
    for c, m in zip(ctxs, many):
        one = decide(SCHEMA, c, engine=tiny)
        assert one.value_dict() == m.value_dict() and _max_diff(one, m) <= TOLERANCE
    assert plan_for(SCHEMA, tiny) is plan_for(SCHEMA, tiny)  # cached per engine
    with pytest.raises(TypedLMError, match="list of strings"):
        decide_many(SCHEMA, CTX, engine=tiny)


def test_bad_input(tiny):
    with pytest.raises(TypedLMError, match="context is empty"):
        decide(SCHEMA, "  ", engine=tiny)
    with pytest.raises(TypedLMError, match="context is"):
        decide(SCHEMA, "word " * 5000, engine=tiny)
    with pytest.raises(TypedLMError, match="scoring: Input should be 'labels' or 'slots'"):
        decide(SCHEMA, CTX, engine=tiny, scoring="fast")
    with pytest.raises(TypedLMError, match="abstain_below_margin"):
        decide(SCHEMA, CTX, engine=tiny, abstain_below_margin=2.0)
    with pytest.raises(TypedLMError, match="temperature: Extra inputs are not permitted"):
        decide(SCHEMA, CTX, engine=tiny, temperature=0.5)  # not an option: named, never ignored


def _oom_engine(tiny, oom_limit: int) -> Engine:
    """The tiny engine, but any forward over more than ``oom_limit`` row tokens runs out of memory (an OOM
    cannot be provoked on this CPU)."""
    real = tiny.runner.forward

    def forward(input_ids, cache=None, **kwargs):
        if cache is not None and input_ids.numel() > oom_limit:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(input_ids, cache, **kwargs)

    return dataclasses.replace(tiny, runner=tiny.runner.wrapped(forward))


@pytest.mark.parametrize("packing", ["packed", "expand"])
def test_oom_halves_the_chunk_and_counts(tiny, packing, no_prefix_cache):
    eng = _oom_engine(tiny, 16)  # (the simulated OOM hits any forward on a cache: prefills on a cached prefix too)
    ref = decide(SCHEMA, CTX, engine=tiny)
    d = decide(SCHEMA, CTX, engine=eng, packing=packing)
    assert d.usage["oom_retries"] >= 1 and d.usage["rows"] == ref.usage["rows"]
    assert d.value_dict() == ref.value_dict() and _max_diff(d, ref) <= TOLERANCE
    eng = _oom_engine(tiny, 0)
    with pytest.raises(TypedLMError, match="out of memory scoring a single decision row"):
        decide(SCHEMA, CTX, engine=eng, packing=packing)


def test_naive_baseline_is_schema_valid(tiny):
    plan = plan_for(SCHEMA, tiny)
    schema = naive_json_schema(plan)
    assert list(schema["properties"]) == ["priority", "spam", "topic", "tags", "tags.count"]
    r = naive_generate(SCHEMA, CTX, engine=tiny)
    assert r.finish_reason == "stop" and r.schema_valid, r.schema_errors
    assert set(r.json()) == set(schema["properties"])
    assert not math.isnan(r.timings["total"])


def test_plans_are_cached_on_the_engine_and_bounded(tiny):
    from typedlm.decide import DecisionSchema, get_plan
    from typedlm.lru import LRUCache

    schema = DecisionSchema.coerce(SCHEMA)
    first = get_plan(tiny, schema)
    assert get_plan(tiny, schema) is first and get_plan(tiny, schema, "slots") is not first
    cache, built = LRUCache(2), []
    for key in ("a", "b", "a", "c", "b"):  # "b" is the oldest when "c" arrives, so it is built again
        cache.get_or_build(key, lambda: built.append(key) or key)
    assert built == ["a", "b", "c", "b"] and len(cache) == 2
