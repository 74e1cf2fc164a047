"""Jump-forward: forced text appended without sampling, canonical tokens only, batched rows unaffected."""

import json

import httpx
import jsonschema
import pytest

from typedlm.generate import generate
from typedlm.generate import SamplingParams, build_sequence
from typedlm.generate.scheduler import Request, Scheduler, TokenEvent, run_batch
from typedlm.grammar import make_constraint
from typedlm.grammar.jump_forward import JumpForward
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server

SCHEMA = {"type": "object", "properties": {
    "customer_identifier": {"type": "integer", "minimum": 0, "maximum": 99},
    "preferred_contact_channel": {"enum": ["electronic_mail", "telephone_call"]},
    "is_active_subscription": {"type": "boolean"}},
    "required": ["customer_identifier", "preferred_contact_channel", "is_active_subscription"],
    "additionalProperties": False}


def _seq(eng, c, jump, prompt="x", max_tokens=120):
    ids = eng.encode_prompt(prompt=prompt)
    return build_sequence(eng, ids, SamplingParams(max_tokens=max_tokens, temperature=0), c, jump_forward=jump)


def test_forced_tokens_are_appended_and_output_stays_valid(tiny):
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    on, off = run_batch(tiny, [_seq(tiny, c, True)])[0], run_batch(tiny, [_seq(tiny, c, False)])[0]
    for r in (on, off):
        assert r.finish_reason == "stop" and r.schema_valid, r
    assert on.forced_tokens > 10 and off.forced_tokens == 0
    assert on.usage["completion_tokens"] == len(on.token_ids)


def test_jump_forward_rows_in_a_batch_leave_other_rows_unchanged(tiny):
    """Rows that feed several tokens in one step are right-padded and masked: the other rows of the
    batch must decode exactly as alone (greedy), and the jumping row as it does alone."""
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    regex = make_constraint(regex=r"[a-z]{3,12}( [a-z]{2,8}){2}")
    mk = [lambda: _seq(tiny, c, True), lambda: _seq(tiny, None, False, "free text", 30),
          lambda: _seq(tiny, regex, False, "word", 30), lambda: _seq(tiny, c, True, "other prompt")]
    alone = [run_batch(tiny, [m()])[0] for m in mk]
    together = run_batch(tiny, [m() for m in mk], max_batch=4)
    for a, t in zip(alone, together):
        assert t.token_ids == a.token_ids and t.text == a.text


def test_only_canonical_tokens_are_forced(tiny):
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    seq = _seq(tiny, c, False)
    jf = JumpForward(tiny)
    tok = tiny.tokenizer
    first = tok.encode('{"', add_special_tokens=False)
    assert len(first) == 1
    seq.append(first[0])
    forced = seq.grammar.matcher.find_jump_forward_string()
    assert forced.startswith("customer_identifier")
    ids = jf.tokens(seq)
    assert ids and forced.startswith(tok.decode(ids))
    assert tok.encode('{"' + tok.decode(ids), add_special_tokens=False) == first + ids  # canonical
    # a last token the forced text would merge into: no jump (fall back to sampling)
    seq2 = _seq(tiny, c, False)
    brace = tok.encode("{", add_special_tokens=False)[0]
    seq2.append(brace)
    assert seq2.grammar.matcher.find_jump_forward_string().startswith('"customer')
    assert jf.tokens(seq2) == []


@pytest.fixture(scope="module")
def url(tiny):
    with live_server(create_app(tiny, ServerConfig(jump_forward=False))) as u:
        yield u


def test_server_request_field_and_usage(url, tiny):
    body = {"model": tiny.name, "messages": [{"role": "user", "content": "x"}], "max_tokens": 120,
            "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA,
                                                                                         "strict": True}}}
    off = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
    on = httpx.post(url + "/v1/chat/completions", json={**body, "jump_forward": True}, timeout=120).json()
    assert "forced_tokens" not in off["usage"] and on["usage"]["forced_tokens"] > 0
    jsonschema.validate(json.loads(on["choices"][0]["message"]["content"]), SCHEMA)
    r = httpx.post(url + "/v1/chat/completions", json={**body, "jump_forward": True, "logprobs": True}, timeout=60)
    assert r.status_code == 400 and "jump_forward" in r.json()["error"]["message"]


def test_server_wide_flag(tiny):
    with live_server(create_app(tiny, ServerConfig(jump_forward=True))) as u:
        body = {"model": tiny.name, "prompt": "x", "max_tokens": 120, "temperature": 0, "guided_json": SCHEMA}
        on = httpx.post(u + "/v1/completions", json=body, timeout=120).json()
        off = httpx.post(u + "/v1/completions", json={**body, "jump_forward": False}, timeout=120).json()
    assert on["usage"]["forced_tokens"] > 0 and "forced_tokens" not in off["usage"]


def _run_events(eng, seqs):
    """Decode ``seqs`` together; per row the (token, forced) pairs in order and the result."""
    sched = Scheduler(eng, max_batch=len(seqs), max_queue=len(seqs))
    events = [[] for _ in seqs]
    reqs = [sched.submit(Request(seq=s, on_event=lambda e, i=i: isinstance(e, TokenEvent) and events[i].append(
        (e.token, e.forced)))) for i, s in enumerate(seqs)]
    while sched.has_work():
        sched.step()
    return events, [r.result for r in reqs]


def test_given_the_same_forced_tokens_the_sampled_ones_are_the_same(tiny):
    """What jump-forward changes is only *which* tokens spell the forced text (canonical ones, fed in
    one multi-token forward). A run without jump-forward that is pinned to the same tokens at the
    forced steps only (a logits processor) must sample exactly the same tokens at every other step:
    the multi-token forward gives the same next-token logits as feeding the tokens one by one."""
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    events, results = _run_events(tiny, [_seq(tiny, c, True), _seq(tiny, None, False, "free", 20)])
    forced = {i: t for i, (t, f) in enumerate(events[0]) if f}
    sampled = [i for i, (_, f) in enumerate(events[0]) if not f]
    assert len(forced) > 10 and len(sampled) > 5
    prompt_len = len(tiny.encode_prompt(prompt="x"))

    def pin(seen, logits):
        step = len(seen) - prompt_len
        if step in forced:
            logits[forced[step]] += 1e4
        return logits

    ids = tiny.encode_prompt(prompt="x")
    seq = build_sequence(tiny, ids, SamplingParams(max_tokens=120, temperature=0, logits_processors=(pin,)), c)
    _, without = _run_events(tiny, [seq, _seq(tiny, None, False, "free", 20)])
    assert without[0].token_ids == results[0].token_ids and without[0].text == results[0].text
    assert without[0].forced_tokens == 0 and results[0].forced_tokens == len(forced)


@pytest.mark.real_model
def test_default_model_output_is_valid_and_takes_fewer_steps(real):
    """On SmolLM2 greedy output with jump-forward is NOT the same text as without: the model's own
    greedy spelling of forced keys is not the canonical tokenization, so the contexts differ after the
    first forced stretch (measured: bench/results/jump-forward-cpu.md). Both stay schema-valid."""
    msgs = [{"role": "user", "content": "Customer 42 prefers the telephone and has an active subscription. "
                                        "Give the record as JSON."}]
    kw = dict(messages=msgs, engine=real, json_schema=SCHEMA, any_whitespace=False, max_tokens=80, temperature=0)
    on = generate(**kw, jump_forward=True)
    assert on.schema_valid and on.finish_reason == "stop"
    assert on.forced_tokens > 0


def test_multi_token_step_gives_the_logits_of_one_token_steps(tiny):
    """BatchKV.step with several tokens for one row (right-padded, masked for the others) gives the
    same next-token logits as feeding the same tokens one step at a time."""
    import torch

    from typedlm.generate.batch_cache import BatchKV

    def batch(prompts):
        kv = BatchKV(tiny)
        for p in prompts:
            ids = torch.tensor([tiny.encode_prompt(prompt=p)])
            _, cache = tiny.forward(ids)
            kv.add(cache, ids.shape[1])
        return kv

    feeds = [[11, 12, 13, 14], [21], [31, 32]]
    with torch.inference_mode():
        kv = batch(["a b c", "free text here", "x"])
        multi = kv.step(feeds)
        after = kv.step([[5], [6], [7]])
        singles, afters = [], []
        for row, p in enumerate(["a b c", "free text here", "x"]):
            one = batch([p])
            for t in feeds[row]:
                out = one.step([[t]])
            singles.append(out[0])
            afters.append(one.step([[5 + row]])[0])
    for row in range(3):
        assert torch.allclose(multi[row], singles[row], atol=1e-4), row
        assert torch.allclose(after[row], afters[row], atol=1e-4), row
