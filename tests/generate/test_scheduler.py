"""Continuous batching: batched == single-row (greedy, fp32 tiny model), no mask bleed, free rows
pay nothing, join/leave/cancel free their rows."""

import re
import threading

import jsonschema
import pytest

from typedlm.errors import TypedLMError
from typedlm.generate import SamplingParams, build_sequence, finish_result
from typedlm.generate.requests import QueueFull, Request
from typedlm.generate.scheduler import Scheduler, run_batch
from typedlm.grammar import GrammarRow, make_constraint
from typedlm.grammar.backends.xgrammar import XGrammarFiller

from tests.support.reference_loop import run_sequence

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog and then", "a",
           "Write JSON about cats please now", "x y z", "One two three four five six seven eight nine ten eleven",
           "Tell me", "Q: what is 2+2? A:"]
SCHEMA_A = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                             "age": {"type": "integer", "minimum": 0, "maximum": 99}},
            "required": ["name", "age"], "additionalProperties": False}
SCHEMA_B = {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}
REGEX = r"[a-z]{2,6}-\d{1,4}"
CHOICES = ["yes", "no way", "maybe"]


def constraints():
    # One engine, named: under the default (handoff) a row moves from llguidance to xgrammar whenever the
    # background compile ends, and the two engines' masks need not allow the same tokens (the same language through
    # other tokenizations), so a greedy row would differ by timing. The handoff itself is tested in tests/grammar/test_handoff.py.
    x = {"engine": "xgrammar"}
    return [None, make_constraint(json_schema=SCHEMA_A, any_whitespace=False, **x), None,
            make_constraint(regex=REGEX, **x), make_constraint(choice=CHOICES, **x),
            make_constraint(json_schema=SCHEMA_B, any_whitespace=False, **x), None,
            make_constraint(json_object=True, **x)]


def single(engine, prompt, params, c):
    seq = build_sequence(engine, engine.encode_prompt(prompt=prompt), params, c)
    run_sequence(engine, seq)
    return finish_result(seq)


def check_valid(c, text):
    if c is None:
        return
    if c.kind == "json_schema":
        import json
        jsonschema.validate(json.loads(text), c.value)
    elif c.kind == "json_object":
        import json
        assert isinstance(json.loads(text), dict)
    elif c.kind == "regex":
        assert re.fullmatch(REGEX, text), text
    elif c.kind == "choice":
        assert text in CHOICES


@pytest.mark.parametrize("max_batch", [1, 3, 8])
def test_greedy_batched_equals_single_row(tiny, max_batch):
    params = SamplingParams(max_tokens=24, temperature=0)
    cs = constraints()
    solo = [single(tiny, p, params, c) for p, c in zip(PROMPTS, cs)]
    seqs = [build_sequence(tiny, tiny.encode_prompt(prompt=p), params, c) for p, c in zip(PROMPTS, cs)]
    batched = run_batch(tiny, seqs, max_batch=max_batch)
    for a, b in zip(solo, batched):
        assert b.token_ids == a.token_ids
        assert b.finish_reason == a.finish_reason
        assert b.text == a.text


def test_sampled_rows_follow_their_own_grammar(tiny):
    """Temperature 1 with per-row seeds: each row valid for ITS constraint (no mask bleed), and a seeded
    row in a batch samples exactly what it samples alone."""
    params = [SamplingParams(max_tokens=48, temperature=1.0, seed=100 + i) for i in range(len(PROMPTS))]
    cs = constraints()
    seqs = [build_sequence(tiny, tiny.encode_prompt(prompt=p), sp, c) for p, sp, c in zip(PROMPTS, params, cs)]
    results = run_batch(tiny, seqs, max_batch=8)
    for c, r in zip(cs, results):
        assert r.finish_reason in ("stop", "length")
        if c is not None and r.finish_reason == "stop":
            check_valid(c, r.text)
        if c is not None and c.kind in ("choice", "regex"):
            assert r.finish_reason == "stop"
    solo = [single(tiny, p, sp, c) for p, sp, c in zip(PROMPTS, params, cs)]
    assert [r.token_ids for r in results] == [s.token_ids for s in solo]


def test_free_rows_pay_nothing_for_grammar_rows(tiny, monkeypatch):
    """Every mask fill goes through the one batched fill call, and only grammar rows are in it."""
    fills, single = [], []
    real_batch = XGrammarFiller.fill
    real_fill = GrammarRow.fill

    def spy_batch(self, states, *a, **k):
        fills.extend(id(s) for s in states)
        return real_batch(self, states, *a, **k)

    monkeypatch.setattr(XGrammarFiller, "fill", spy_batch)
    monkeypatch.setattr(GrammarRow, "fill",
                        lambda self: (single.append(id(self)) if not self.filled else None, real_fill(self))[1])
    params = SamplingParams(max_tokens=12, temperature=0)
    c = make_constraint(regex=r"[a-z]{12}")
    seqs = [build_sequence(tiny, tiny.encode_prompt(prompt=p), params, c if i == 0 else None)
            for i, p in enumerate(PROMPTS[:4])]
    grammar_id = id(seqs[0].grammar.cursor)
    results = run_batch(tiny, seqs, max_batch=4)
    # one mask fill per token of the constrained row (+1 for the state after the last), none for free rows
    assert set(fills) == {grammar_id} and not single
    assert results[0].completion_tokens <= len(fills) <= results[0].completion_tokens + 1
    assert results[0].finish_reason == "stop" and len(results[0].text) == 12
    assert all(r.finish_reason == "length" for r in results[1:])


def test_complete_grammar_finishes_before_sampling_and_leaves_the_batch(tiny):
    params = SamplingParams(max_tokens=30, temperature=0)
    sched = Scheduler(tiny, max_batch=4, max_queue=8)
    choice = sched.submit(Request(build_sequence(tiny, tiny.encode_prompt(prompt="q"), params,
                                                 make_constraint(choice=["ok"]))))
    free = sched.submit(Request(build_sequence(tiny, tiny.encode_prompt(prompt="hello there"), params, None)))
    sizes = []
    while sched.has_work():
        sched.step()
        sizes.append((sched.batch_size, sched.kv.size))
    assert choice.result.text == "ok" and choice.result.finish_reason == "stop"
    assert free.result.completion_tokens == 30
    assert all(b == k for b, k in sizes)  # KV rows always match the running rows
    assert sizes[0] == (2, 2) and sizes[-1] == (0, 0) and (1, 1) in sizes
    assert choice.seq.grammar is None  # matcher freed on finish


def test_cancel_frees_row_and_cache(tiny):
    params = SamplingParams(max_tokens=200, temperature=0)
    sched = Scheduler(tiny, max_batch=4, max_queue=8)
    reqs = [sched.submit(Request(build_sequence(tiny, tiny.encode_prompt(prompt=p), params,
                                                make_constraint(json_object=True) if i else None)))
            for i, p in enumerate(PROMPTS[:3])]
    for _ in range(5):
        sched.step()
    assert sched.batch_size == 3
    sched.cancel(reqs[1])
    sched.step()
    assert reqs[1].result.finish_reason == "abort"
    assert reqs[1].seq.grammar is None
    assert sched.batch_size == 2 and sched.kv.size == 2
    sched.cancel(reqs[0])
    sched.cancel(reqs[2])
    sched.step()
    assert sched.batch_size == 0 and sched.kv.size == 0 and sched.kv.free_slots == sched.kv.capacity
    waiting = sched.submit(Request(build_sequence(tiny, tiny.encode_prompt(prompt="x"), params, None)))
    sched.cancel(waiting)
    sched.step()
    assert waiting.result.finish_reason == "abort" and sched.queue_depth == 0


def test_admission_queue_bound_and_exclusive_calls(tiny):
    sched = Scheduler(tiny, max_batch=1, max_queue=2).start()
    try:
        gate = threading.Event()
        blocked = sched.call(gate.wait, 30)  # occupies the engine thread: nothing is admitted meanwhile
        params = SamplingParams(max_tokens=3, temperature=0)
        ids = tiny.encode_prompt(prompt="hi")
        reqs = [sched.submit(Request(build_sequence(tiny, ids, params, None))) for _ in range(2)]
        with pytest.raises(QueueFull):
            sched.submit(Request(build_sequence(tiny, ids, params, None)))
        assert sched.queue_depth == 2
        gate.set()
        assert blocked.result(30) is True
        for r in reqs:
            assert r.done.wait(30) and r.result.finish_reason == "length"
        assert sched.call(lambda: sched.batch_size).result(30) == 0  # runs between steps, never in one
    finally:
        sched.stop()


def test_bad_scheduler_settings(tiny):
    with pytest.raises(TypedLMError):
        Scheduler(tiny, max_batch=0)


def test_slots_are_reused_after_eviction_without_leaking_kv(tiny):
    """A row that takes the slot of a longer, evicted row sees none of the old row's KV: its greedy
    output equals its single-row reference, and it sits in the freed slot."""
    from typedlm.runner.static_kv import StaticKV

    params = SamplingParams(max_tokens=10, temperature=0)
    sched = Scheduler(tiny, max_batch=2, max_queue=8)
    assert isinstance(sched.kv, StaticKV)
    long_row = sched.submit(Request(build_sequence(tiny, tiny.encode_prompt(prompt=PROMPTS[5] * 3), params, None)))
    other = sched.submit(Request(build_sequence(tiny, tiny.encode_prompt(prompt=PROMPTS[1]),
                                                SamplingParams(max_tokens=30, temperature=0), None)))
    sched.step()
    freed = long_row.slot
    while long_row.result is None:
        sched.step()
    late = [sched.submit(Request(build_sequence(tiny, tiny.encode_prompt(prompt=p), params, None)))
            for p in ("a", PROMPTS[3])]
    sched.step()
    assert late[0].slot == freed  # lowest free slot first
    while sched.has_work():
        sched.step()
    for req, prompt in zip(late, ("a", PROMPTS[3])):
        assert req.result.token_ids == single(tiny, prompt, params, None).token_ids
    assert other.result.token_ids == single(tiny, PROMPTS[1], SamplingParams(max_tokens=30, temperature=0),
                                            None).token_ids


def test_decode_steps_feed_the_sampled_ids_on_the_device(tiny, monkeypatch):
    """Static slots take a step's ids as the sampler's device tensor (the host reads them a step late): rows
    with grammars, stop ids and different lengths, more rows than slots (reuse), give the same tokens as the
    host-fed steps and as one row alone, and the device feed is what ran."""
    kv = tiny.runner.decode_cache(3)
    fed = []
    real = tiny.runner.step_ids
    monkeypatch.setattr(tiny.runner, "step_ids", lambda kv, ids, slots: (fed.append(len(slots)), real(kv, ids, slots))[1])
    cs = constraints()
    params = [SamplingParams(max_tokens=6 + 3 * i, temperature=0) for i in range(len(PROMPTS))]

    def batch():
        seqs = [build_sequence(tiny, tiny.encode_prompt(prompt=p), sp, c) for p, sp, c in zip(PROMPTS, params, cs)]
        return run_batch(tiny, seqs, max_batch=3)

    on = batch()
    assert fed and sum(fed) >= sum(r.completion_tokens for r in on) - 2 * len(on)
    monkeypatch.setattr(kv, "device_feed", False, raising=False)
    fed.clear()
    off = batch()
    assert not fed
    solo = [single(tiny, p, sp, c) for p, sp, c in zip(PROMPTS, params, cs)]
    for a, b, s, c in zip(on, off, solo, cs):
        assert a.token_ids == b.token_ids == s.token_ids
        assert a.finish_reason == b.finish_reason == s.finish_reason
        if a.finish_reason == "stop":
            check_valid(c, a.text)
