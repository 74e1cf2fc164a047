"""Jump-forward: grammar-forced text drafted as canonical tokens and verified by the model, so greedy
output equals the output without it; batched rows unaffected; both KV backends."""

import json

import httpx
import jsonschema
import pytest

from typedlm.generate import generate
from typedlm.generate import SamplingParams, build_sequence
from typedlm.generate.requests import Request, TokenEvent
from typedlm.generate.scheduler import Scheduler, run_batch
from typedlm.grammar import make_constraint
from typedlm.generate.spec_decode import JumpForward
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


OTHER = {"type": "object", "properties": {
    "name_of_the_person": {"type": "string", "maxLength": 8},
    "list_of_items": {"type": "array", "items": {"enum": ["alpha_value", "beta_value"]}, "maxItems": 3}},
    "required": ["name_of_the_person", "list_of_items"], "additionalProperties": False}


@pytest.fixture(params=["StaticKV", "BatchKV", "StaticKV+device-mask"])
def kv_kind(request, monkeypatch, tiny):
    """Run the scheduler on either KV backend (the tiny Llama takes StaticKV by default).
    ``+device-mask``: the sampler keeps its mask in a second tensor that only ``upload`` refreshes, as on
    CUDA (on the CPU the two are one tensor): a host mask the sampler does not know changed is then
    missed, as it was on the H200 after a fully accepted draft (``grammar rejected sampled token``)."""
    if request.param == "BatchKV":
        real = tiny.runner.decode_cache
        monkeypatch.setattr(tiny.runner, "decode_cache", lambda n: real(n, dynamic=True))
    if request.param.endswith("+device-mask"):
        from typedlm.generate.sampler import BatchSampler

        init = BatchSampler.__init__

        def separate(self, **kw):
            init(self, **kw)
            self._device_mask = self.bitmask.clone()

        monkeypatch.setattr(BatchSampler, "__init__", separate)
    return request.param


def test_forced_tokens_are_appended_and_output_stays_valid(tiny):
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    on, off = run_batch(tiny, [_seq(tiny, c, True)])[0], run_batch(tiny, [_seq(tiny, c, False)])[0]
    for r in (on, off):
        assert r.finish_reason == "stop" and r.schema_valid, r
    assert on.forced_tokens > 0 and off.forced_tokens == 0
    assert on.usage["completion_tokens"] == len(on.token_ids)


@pytest.mark.parametrize("schema", [SCHEMA, OTHER], ids=["record", "list"])
@pytest.mark.parametrize("ws", [False, True], ids=["compact", "any_ws"])
def test_greedy_output_equals_the_output_without_jump_forward(tiny, kv_kind, schema, ws):
    """Drafts are verified: a row keeps only the draft tokens its own masked argmax picks, the KV
    forgets the rest. Several prompts in one batch (rows accept and reject at different steps), next
    to a free-text row; every row equals its run without jump-forward, token for token. The random
    model takes some drafts and rejects others (both paths run), and the accepted ones are reported
    as forced tokens, each one a ``forced`` token event."""
    # xgrammar named: under the default (handoff) a row's engine depends on when the background compile ends, and
    # the engines' first masks differ by tokenization (one allows '{"', the other only '{'), so greedy runs would not
    # compare token for token
    c = make_constraint(json_schema=schema, any_whitespace=ws, engine="xgrammar")
    prompts = ["x", "hello there", "JSON please"]
    mk = lambda jump: [_seq(tiny, c, jump, p) for p in prompts] + [_seq(tiny, None, False, "free", 20)]
    on_seqs = mk(True)
    events, on = _run_events(tiny, on_seqs)
    _, off = _run_events(tiny, mk(False))
    for a, b in zip(on, off):
        assert a.token_ids == b.token_ids and a.text == b.text and a.finish_reason == b.finish_reason
    assert all(r.finish_reason == "stop" and r.schema_valid for r in on[:3])
    drafted = sum(s.jump.drafted for s in on_seqs[:3])
    forced = sum(r.forced_tokens for r in on)
    assert 0 < forced < drafted  # some drafts accepted, some rejected
    assert forced == sum(f for ev in events for _, f in ev)
    for ev, r in zip(events, on):
        assert [t for t, _ in ev] == r.token_ids


def test_rejected_drafts_are_forgotten_by_the_kv(tiny, kv_kind, monkeypatch):
    """Without the KV rollback the rejected draft tokens stay in the context and the output drifts
    from the run without jump-forward (this fails when ``truncate`` does nothing)."""
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    off = run_batch(tiny, [_seq(tiny, c, False, "hello there")])[0]
    real = tiny.runner.decode_cache

    def kv_without_rollback(n):
        kv = real(n)
        monkeypatch.setattr(kv, "truncate", lambda *a: None)
        return kv

    monkeypatch.setattr(tiny.runner, "decode_cache", kv_without_rollback)
    broken = run_batch(tiny, [_seq(tiny, c, True, "hello there")])[0]
    assert broken.token_ids != off.token_ids


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
    forced = seq.grammar.jump_string()
    assert forced.startswith("customer_identifier")
    ids = jf.tokens(seq)
    assert ids and forced.startswith(tok.decode(ids))
    assert tok.encode('{"' + tok.decode(ids), add_special_tokens=False) == first + ids  # canonical
    # a last token the forced text would merge into: no jump (fall back to sampling)
    seq2 = _seq(tiny, c, False)
    brace = tok.encode("{", add_special_tokens=False)[0]
    seq2.append(brace)
    assert seq2.grammar.jump_string().startswith('"customer')
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


@pytest.mark.real_model
def test_default_model_output_equals_the_output_without_jump_forward(real):
    """On SmolLM2 (a trained model) greedy output with jump-forward is the same text as without, and
    the model confirms drafted tokens (measured: bench/results/jump-forward-cpu.json)."""
    msgs = [{"role": "user", "content": "Customer 42 prefers the telephone and has an active subscription. "
                                        "Give the record as JSON."}]
    kw = dict(messages=msgs, engine=real, json_schema=SCHEMA, any_whitespace=False, max_tokens=80, temperature=0)
    on, off = generate(**kw, jump_forward=True), generate(**kw)
    assert on.token_ids == off.token_ids and on.text == off.text
    assert on.forced_tokens > 0


def test_a_sampling_row_keeps_its_distribution_at_draft_positions(tiny):
    """The exact rule for a deterministic draft: accept the draft token with probability p(draft),
    else draw from p without it. Over many trials (seeded: deterministic) the token a sampling row
    takes at a draft position follows p itself — accepting always (unverified forcing) or redrawing
    from p with the draft still allowed both fail this."""
    import torch

    from typedlm.generate.sampler import BatchSampler

    c = make_constraint(choice=["alpha", "beta", "gamma"])
    ids = tiny.encode_prompt(prompt="x")
    seq = build_sequence(tiny, ids, SamplingParams(max_tokens=8, temperature=1.0, seed=7), c)
    sampler = BatchSampler(max_batch=1, vocab_size=tiny.model_vocab_size,
                           tokenizer_vocab_size=tiny.tokenizer_vocab_size, device=tiny.device)
    sampler.admit(0, seq)
    first = {w: tiny.tokenizer.encode(w, add_special_tokens=False)[0] for w in ("alpha", "beta", "gamma")}
    assert len(set(first.values())) == 3
    p = {"alpha": 0.2, "beta": 0.5, "gamma": 0.3}
    logits = torch.full((tiny.model_vocab_size,), -30.0)
    for w, t in first.items():
        logits[t] = float(torch.tensor(p[w]).log())
    draft, counts, n = first["alpha"], {t: 0 for t in first.values()}, 1500
    for _ in range(n):
        seq.grammar.filled = False
        if sampler.verify(logits, seq, 0, draft):
            t = draft
        else:
            sampler.forbid(seq, draft)
            t = sampler.finish(sampler.sample(logits.clone()[None], [seq], [0]), [seq])[0]
        counts[t] += 1
    for w, t in first.items():
        assert abs(counts[t] / n - p[w]) < 0.05, (w, counts[t] / n)


def test_sampling_rows_verify_their_drafts_reproducibly(tiny, kv_kind):
    """Seeded sampling rows with jump-forward: drafts are accepted by the row's own generator, so a
    seed gives the same output twice; the output stays schema-valid and some drafts are accepted."""
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    ids = tiny.encode_prompt(prompt="x")
    mk = lambda: [build_sequence(tiny, ids, SamplingParams(max_tokens=120, temperature=0.8, seed=s), c,
                                 jump_forward=True) for s in range(3)]
    a, b = run_batch(tiny, mk(), max_batch=3), run_batch(tiny, mk(), max_batch=3)
    assert [r.token_ids for r in a] == [r.token_ids for r in b]
    assert all(r.finish_reason == "stop" and r.schema_valid for r in a)
    assert sum(r.forced_tokens for r in a) > 0


def test_after_a_reasoning_block_greedy_output_is_unchanged():
    """A reasoning row: free thinking, the end marker forced at its budget, then the grammar with
    jump-forward drafts; the output equals the same row without jump-forward."""
    from typedlm.testing import tiny_reasoning_engine

    eng = tiny_reasoning_engine()
    c = make_constraint(json_schema=SCHEMA, any_whitespace=False)
    ids = eng.encode_prompt(prompt="x")
    mk = lambda jump: build_sequence(eng, ids, SamplingParams(max_tokens=150, temperature=0), c, thinking=True,
                                     reasoning_budget=12, jump_forward=jump)
    on, off = run_batch(eng, [mk(True)])[0], run_batch(eng, [mk(False)])[0]
    assert on.token_ids == off.token_ids and on.reasoning == off.reasoning and on.text == off.text
    assert on.reasoning_tokens >= 12 and on.schema_valid and on.forced_tokens > off.forced_tokens
