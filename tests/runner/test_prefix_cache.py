"""Prefix cache across requests (issue 25): the same greedy tokens, logits and decide probabilities with and
without it (tiny fp32 model), usage counts exactly the reused tokens, eviction under a tiny bound, churn,
concurrency with overlapping prefixes, invalidation on a weights change, the server's usage and metrics."""

import concurrent.futures
import random
import re

import httpx
import openai
import pytest
import torch

from typedlm.decide import decide, decide_many
from typedlm.decide.plan import get_plan
from typedlm.decide.prompt import prompt_ids
from typedlm.decide.schema import DecisionSchema
from typedlm.errors import TypedLMError
from typedlm.generate.api import build_sequence
from typedlm.generate.sampling import SamplingParams
from typedlm.generate.requests import Request
from typedlm.generate.scheduler import Scheduler, run_batch
from typedlm.runner.prefix_cache import BLOCK, MISS, PrefixCache, configure, reused_by, tally
from typedlm.testing import tiny_engine

SYSTEM = "You are a support agent for a bank. Answer briefly and politely, and never invent account data. " * 4
USERS = ["hello", "where is my card?", "I was charged twice for one coffee", "close my account please",
         "what is the interest rate on savings?", "hello"]
SCHEMA = {"description": "Triage a support ticket.", "fields": {
    "urgent": {"type": "boolean", "description": "Does it need an answer today?"},
    "topic": {"type": "enum", "choices": ["billing", "cards", "accounts", "other"], "description": "The topic"},
    "tags": {"type": "multi", "choices": ["fraud", "fee", "travel"], "description": "Tags that apply"}}}
TICKETS = ["My card was charged twice for the same coffee.", "I lost my card abroad, block it!",
           "How do I close my savings account?", "Why is there a fee on my statement?"]


@pytest.fixture(scope="module")
def eng():
    """A tiny engine of this module's own, so the tests see only their own cache entries."""
    return tiny_engine(seed=3)


@pytest.fixture
def cache(eng):
    c = eng.runner.prefix_cache
    c.set_limit(1 << 30)
    c.clear()
    yield c
    c.set_limit(1 << 30)


def lcp(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def whole_blocks(n: int) -> int:
    return n - n % BLOCK


def chat_ids(eng, user: str) -> list[int]:
    return eng.encode_prompt(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}])


def greedy(eng, prompts, max_batch=4, dynamic=False, max_tokens=8):
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    seqs = [build_sequence(eng, p, params, None) for p in prompts]
    if not dynamic:
        return run_batch(eng, seqs, max_batch=max_batch)
    sched = Scheduler(eng, max_batch=max_batch)
    sched.kv = eng.runner.decode_cache(max_batch, dynamic=True)
    reqs = [sched.submit(Request(seq=s)) for s in seqs]
    while sched.has_work():
        sched.step()
    return [r.result for r in reqs]


# -- the cache itself (fake KV: each token's "KV" is its id) ----------------------------------------------------
def fake_read(ids):
    return lambda a, b: torch.tensor(ids[a:b], dtype=torch.float32).view(1, 1, 1, b - a, 1).expand(2, 2, 1, -1, 1)


def test_whole_blocks_match_and_give_the_prompts_own_kv():
    c = PrefixCache(1 << 20)
    a = list(range(100))
    assert c.insert(a, fake_read(a)) == 100 // BLOCK
    b = a[:40] + [999] * 30
    hit = c.match(b)
    assert hit.length == whole_blocks(40) and torch.equal(hit.kv()[0, 0, 0, :, 0], torch.tensor(a[:whole_blocks(40)], dtype=torch.float32))
    assert c.match(a, limit=len(a) - 1).length == whole_blocks(99)
    assert c.match([5] + a).length == 0  # a block's KV belongs to its exact prefix, never to a shifted copy
    assert (c.stats.hits, c.stats.misses, c.stats.cached_tokens) == (2, 1, 32 + 96)


def test_insert_after_its_own_lookup_walks_only_the_new_blocks():
    """A prompt stored after its own lookup (``after=``) follows the matched blocks' parent links instead of hashing
    their token tuples again (a chat on a 1,000-token cached system prompt: 1 lookup instead of 2 x 63)."""
    c = PrefixCache(1 << 20)
    a = list(range(10 * BLOCK))
    c.insert(a, fake_read(a))
    b = a + list(range(500, 500 + 3 * BLOCK))
    hit = c.match(b)
    keys = []

    class Counting(dict):
        def get(self, k, d=None):
            keys.append(k)
            return super().get(k, d)

    c._blocks = Counting(c._blocks)
    assert c.insert(b, fake_read(b), after=hit) == 3
    assert len(keys) == 1 + 1 + 1 + 3  # the match still held?; the first new block (absent); still held?; each new one
    assert c.match(b).kv()[0, 0, 0, :, 0].tolist() == b
    stale = c.match(a)
    c.clear()  # the lookup's blocks are gone: the walk starts over
    assert c.insert(a, fake_read(a), after=stale) == 10 and c.match(a).length == len(a)


def test_lru_evicts_leaves_and_churn_never_grows_past_the_bound():
    rng = random.Random(0)
    one = BLOCK * 2 * 2 * 4  # bytes of one fake block (float32)
    c = PrefixCache(12 * one)
    heads = [[rng.randrange(50) for _ in range(3 * BLOCK)] for _ in range(5)]
    for i in range(5000):
        ids = rng.choice(heads)[: rng.randrange(BLOCK, 3 * BLOCK)] + [rng.randrange(50) for _ in range(rng.randrange(40))]
        hit = c.match(ids)
        if hit.length:  # what comes back is always the prompt's own KV
            assert hit.kv()[0, 0, 0, :, 0].tolist() == ids[:hit.length]
        c.insert(ids, fake_read(ids), after=hit if i % 2 else MISS)
        assert c.stats.bytes <= c.limit_bytes and c.stats.blocks * one == c.stats.bytes
    assert c.stats.evictions > 1000 and c.stats.hits > 1000
    # every held block's parent is held too (leaves go first)
    held = {id(b) for b in c._blocks.values()}
    assert all(b.parent is None or id(b.parent) in held for b in c._blocks.values())


def test_a_weights_change_empties_the_cache(eng, cache):
    ids = chat_ids(eng, "hello")
    run_batch(eng, [build_sequence(eng, ids, SamplingParams(max_tokens=1, temperature=0.0), None)])
    assert cache.stats.blocks > 0 and cache.match(ids).length > 0
    w = eng.model.lm_head.weight
    with torch.no_grad():
        w.add_(0.0)  # written in place: the version counter moves
    assert cache.match(ids).length == 0 and cache.stats.blocks == 0
    run_batch(eng, [build_sequence(eng, ids, SamplingParams(max_tokens=1, temperature=0.0), None)])
    assert cache.match(ids).length > 0
    norm = eng.model.model.norm
    norm.weight = torch.nn.Parameter(norm.weight.detach().clone())  # a new Parameter object (the stamp's list is stale)
    assert cache.match(ids).length == 0 and cache.stats.blocks == 0


def test_size_flag_and_backend_without_a_cache(eng, cache):
    configure(eng, 0)
    assert not cache.enabled and cache.stats.bytes == 0
    configure(eng, 0.5)
    assert cache.limit_bytes == 1 << 29
    with pytest.raises(TypedLMError, match=">= 0 GB"):
        configure(eng, -1)


# -- generation ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_prefill_on_a_cached_prefix_is_bit_identical(eng, cache, dynamic):
    """fp32, tiny model: the logits after a cached prefix equal a full prefill exactly (measured Δ = 0)."""
    kv = eng.runner.decode_cache(4, dynamic=dynamic)
    p1, p2 = chat_ids(eng, USERS[0]), chat_ids(eng, USERS[2])
    cache.set_limit(0)
    s = kv.acquire()
    ref = eng.runner.prefill(kv, [p2], [s])
    kv.release(s)
    cache.set_limit(1 << 30)
    for p in (p1, p2):
        s = kv.acquire()
        got = eng.runner.prefill(kv, [p], [s])
        kv.release(s)
    assert kv.cached_tokens(s) == whole_blocks(lcp(p1, p2)) > 0
    assert torch.equal(got, ref)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_greedy_tokens_and_usage_with_and_without_the_cache(eng, cache, dynamic):
    prompts = [chat_ids(eng, u) for u in USERS]
    cache.set_limit(0)
    ref = greedy(eng, prompts, dynamic=dynamic)
    cache.set_limit(1 << 30)
    first = greedy(eng, prompts[:1], dynamic=dynamic)
    got = greedy(eng, prompts[1:], max_batch=2, dynamic=dynamic)  # admitted two at a time: later rows see more
    assert [r.token_ids for r in first + got] == [r.token_ids for r in ref]
    assert first[0].usage["cached_tokens"] == 0 and all(r.usage["cached_tokens"] == 0 for r in ref)
    # rows admitted together look up before either stores; a row admitted later sees every earlier prompt
    seen = [prompts[0]]
    for k in range(1, len(prompts), 2):
        for p, r in zip(prompts[k:k + 2], got[k - 1:k + 1]):
            want = min(whole_blocks(max(lcp(p, q) for q in seen)), whole_blocks(len(p) - 1))
            assert r.usage["cached_tokens"] == want > 0
        seen += prompts[k:k + 2]


@pytest.fixture
def short(eng):
    """The static KV's one-row short prefill switched on (the CUDA graph's code, run eagerly on the CPU)."""
    kv = eng.runner.decode_cache(4)
    eng.runner.forwards(kv).short.enabled = True
    yield kv
    eng.runner.forwards(kv).short.enabled = False


def test_short_prefill_after_a_cached_prefix_matches_the_eager_prefill(eng, cache, short):
    """The short path (tail after the cached prefix, and a short fresh prompt) gives the eager prefill's logits
    (fp32: within 1e-4) and the same greedy tokens."""
    prompts = [chat_ids(eng, u) for u in USERS[:4]]
    tails = [[3, 5, 7], eng.encode_prompt(prompt="hi")]
    cache.set_limit(0)
    eng.runner.forwards(short).short.enabled = False
    ref = [greedy(eng, [p], max_batch=1)[0].token_ids for p in prompts]

    def prefill_all():  # one row at a time, then two rows of one length together
        s = [short.acquire(), short.acquire()]
        out = [eng.runner.prefill(short, [t], s[:1]) for t in tails]
        out.append(eng.runner.prefill(short, [[3, 5, 7], [9, 2, 4]], s))
        for x in s:
            short.release(x)
        return out

    ref_logits = prefill_all()
    eng.runner.forwards(short).short.enabled = True
    calls = []
    run = eng.runner.forwards(short).short.run
    eng.runner.forwards(short).short.run = lambda *a: calls.append(a) or run(*a)
    got_logits = prefill_all()
    eng.runner.forwards(short).short.run = run
    assert len(calls) == 4  # the two rows together: a replay each
    for a, b in zip(got_logits, ref_logits):
        assert a.shape == b.shape and (a - b).abs().max().item() < 1e-4
    cache.set_limit(1 << 30)
    calls.clear()
    eng.runner.forwards(short).short.run = lambda *a: calls.append(a) or run(*a)
    got = [greedy(eng, [p], max_batch=1)[0] for p in prompts]
    eng.runner.forwards(short).short.run = run
    assert [r.token_ids for r in got] == ref
    assert all(r.usage["cached_tokens"] > 0 for r in got[1:])
    assert [c[2] > 0 for c in calls] == [False, True, True, True]  # a short fresh prompt, then 3 cached tails


def test_eviction_under_a_tiny_bound_keeps_running_rows_correct(eng, cache):
    # three chains (one per first user text) that do not fit the bound together
    prompts = [eng.encode_prompt(prompt=f"{u}. {SYSTEM} {v}") for u in USERS[:3] for v in USERS[2:5]]
    cache.set_limit(0)
    ref = greedy(eng, prompts, max_batch=4, max_tokens=12)
    block_bytes = BLOCK * eng.kv_bytes_per_token
    cache.set_limit(8 * block_bytes)
    for _ in range(2):
        got = greedy(eng, prompts, max_batch=4, max_tokens=12)
        assert [r.token_ids for r in got] == [r.token_ids for r in ref]
        assert cache.stats.bytes <= cache.limit_bytes
    assert cache.stats.evictions > 0


# -- decisions -------------------------------------------------------------------------------------------------
def probs(d):
    return {k: f["probabilities"] for k, f in d.to_dict()["fields"].items()}


# Decisions on a cached prefix are not bit-identical: the cached KV and the rest of the prompt go through
# transformers' attention with an explicit mask over past keys instead of one causal prefill; measured here
# (fp32, tiny model): at most ~1.1e-6 in a probability.
CACHED_PROB_TOL = 1e-5


def assert_same(a, b):
    assert a.value_dict() == b.value_dict()
    for (k, pa), pb in zip(probs(a).items(), probs(b).values()):
        for o in pa:
            assert abs(pa[o] - pb[o]) <= CACHED_PROB_TOL, (k, o, pa[o], pb[o])


@pytest.mark.parametrize("packing", ["packed", "fused", "expand"])
def test_decide_reuses_the_plan_prefix_with_the_same_probabilities(eng, cache, packing):
    cache.set_limit(0)
    ref = [decide(SCHEMA, t, engine=eng, prior="none", packing=packing) for t in TICKETS[:2]]
    assert all(d.usage["cached_prompt_tokens"] == 0 for d in ref)
    cache.set_limit(1 << 30)
    got = [decide(SCHEMA, t, engine=eng, prior="none", packing=packing) for t in TICKETS[:2]]
    plan = get_plan(eng, DecisionSchema.coerce(SCHEMA), "labels", False)
    p0, p1 = (prompt_ids(eng, plan, t) for t in TICKETS[:2])
    assert got[0].usage["cached_prompt_tokens"] == 0
    assert got[1].usage["cached_prompt_tokens"] == whole_blocks(lcp(p0, p1)) > 0.8 * len(p1) - 40
    # everything before the context's fence is shared (prompt version 4: the line before it names no nonce)
    fence = eng.tokenizer.decode(p1).rindex("<text-")
    assert lcp(p0, p1) >= len(eng.tokenizer.encode(eng.tokenizer.decode(p1)[:fence], add_special_tokens=False)) - 1
    for a, b in zip(got, ref):
        assert_same(a, b)


def test_auto_packing_scores_a_cached_prompt_in_one_forward(eng, cache, monkeypatch):
    """Off CUDA, ``auto`` is ``packed`` (a causal prefill + the row tree) until the prefix cache holds the prompt's
    plan prefix; then the uncached rest and the rows go in one forward (``fused``), with the same probabilities."""
    import math

    import typedlm.decide.api as api

    monkeypatch.setattr(api, "drift", lambda e: -math.inf)  # no near-tie rescoring: count the scoring forwards only
    fed = []
    forward = eng.runner.forward
    monkeypatch.setattr(eng.runner, "forward",
                        lambda ids, c=None, **kw: fed.append(ids.shape[1]) or forward(ids, c, **kw))
    cache.set_limit(0)
    ref = decide(SCHEMA, TICKETS[1], engine=eng, prior="none")
    assert ref.usage["packing"] == "packed" and len(fed) == 2
    cache.set_limit(1 << 30)
    first = decide(SCHEMA, TICKETS[0], engine=eng, prior="none")
    assert first.usage["packing"] == "packed" and first.usage["cached_prompt_tokens"] == 0
    fed.clear()
    later = decide(SCHEMA, TICKETS[1], engine=eng, prior="none")
    assert later.usage["packing"] == "fused" and later.usage["passes"] == 1
    n, m = later.usage["prompt_tokens"], later.usage["cached_prompt_tokens"]
    assert m > 0.8 * n - 40 and fed == [n - m + later.usage["scored_tokens"]]  # the rest and the row tree, one forward
    assert_same(later, ref)
    assert decide(SCHEMA, TICKETS[1], engine=eng, prior="none", packing="packed").usage["packing"] == "packed"


def test_prefill_prefixes_batches_the_prompts_on_their_cached_prefix(eng, cache):
    """decide_many's batched prefill (contexts whose rows do not fit one pass): prompts with the same cached
    prefix share one forward of their rests; the KV equals each prompt's own prefill (fp32)."""
    plan = get_plan(eng, DecisionSchema.coerce(SCHEMA), "labels", False)
    prompts = [prompt_ids(eng, plan, t) for t in TICKETS]
    eng.runner.prefill_prefix(prompts[0])  # stores the plan prefix
    calls = []
    view = eng.runner.wrapped(lambda ids, c=None, **kw: calls.append(ids.shape) or eng.runner.forward(ids, c, **kw))
    with tally() as seen:
        got = view.prefill_prefixes(prompts[1:])
    m = whole_blocks(min(lcp(prompts[0], p) for p in prompts[1:]))
    assert calls == [(3, max(len(p) for p in prompts[1:]) - m)]  # one forward: the rests after the cached prefix
    assert [n for _, n in seen] == [m] * 3
    cache.set_limit(0)
    for p, kv in zip(prompts[1:], got):
        ref = eng.runner.prefill_prefix(p)
        for a, b in zip(kv.layers, ref.layers):
            assert a.keys.shape == b.keys.shape and (a.keys - b.keys).abs().max() < 1e-4
            assert (a.values - b.values).abs().max() < 1e-4


def test_near_tie_rescoring_reads_the_prompt_from_the_cache(eng, cache, monkeypatch):
    """Without batch invariance every near tie is rescored one row a pass on a fresh prefill of the prompt: that
    prefill reads the prompt the first pass stored, and computes only its last partial block."""
    import typedlm.decide.api as api

    before = eng.runner.invariant
    eng.runner.set_invariant(False)
    monkeypatch.setattr(api, "drift", lambda e: 100.0)  # every field a near tie
    fed = []
    forward = eng.runner.forward
    monkeypatch.setattr(eng.runner, "forward",
                        lambda ids, c=None, **kw: fed.append(ids.shape[1]) or forward(ids, c, **kw))
    try:
        d = decide(SCHEMA, TICKETS[0], engine=eng, prior="none", packing="packed")
    finally:
        eng.runner.set_invariant(before)
    assert {f["score_source"] for f in d.to_dict()["fields"].values()} == {"rescored_one_row"}
    n = d.usage["prompt_tokens"]
    assert fed[0] == n and len(fed) > 3  # the first pass's prefill, then the packed pass and the one-row passes
    assert max(fed[1:]) < BLOCK + 8  # the rescoring's prefill: the prompt's last partial block only; rows: a few


def test_decide_many_and_the_neutral_prior_reuse_it(eng, cache):
    ref_eng = configure(tiny_engine(seed=3), 0)  # the same weights, no cache (its own neutral prior too)
    ref = decide_many(SCHEMA, TICKETS, engine=ref_eng, prior="neutral")
    with tally() as seen:
        got = decide_many(SCHEMA, TICKETS, engine=eng, prior="neutral")  # the first neutral call on this engine
    # the content-free rows of the neutral prior are scored first and store the plan prefix; the contexts read it
    plan = get_plan(eng, DecisionSchema.coerce(SCHEMA), "labels", False)
    prompts = [prompt_ids(eng, plan, t) for t in TICKETS]
    assert all(d.usage["cached_prompt_tokens"] == reused_by(p, seen) > 0 for d, p in zip(got, prompts))
    for a, b in zip(got, ref):
        assert_same(a, b)
    again = decide_many(SCHEMA, TICKETS[::-1], engine=eng, prior="neutral")
    for a, b in zip(again, got[::-1]):
        assert_same(a, b)


# -- concurrency -----------------------------------------------------------------------------------------------
def test_concurrent_chats_and_decisions_with_overlapping_prefixes(eng, cache):
    prompts = [chat_ids(eng, u) for u in USERS] * 2
    cache.set_limit(0)
    ref_gen = [r.token_ids for r in greedy(eng, prompts, max_batch=1)]
    ref_dec = [decide(SCHEMA, t, engine=eng, prior="none") for t in TICKETS]
    cache.set_limit(20 * BLOCK * eng.kv_bytes_per_token)  # small: evictions happen while rows run
    sched = Scheduler(eng, max_batch=3, max_queue=64).start()
    try:
        params = SamplingParams(max_tokens=8, temperature=0.0)

        def chat(p):
            r = sched.submit(Request(seq=build_sequence(eng, p, params, None)))
            r.done.wait(120)
            return r.result.token_ids

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            gens = [pool.submit(chat, p) for p in prompts]
            decs = [pool.submit(decide, SCHEMA, t, engine=eng, prior="none") for t in TICKETS * 2]
            assert [g.result() for g in gens] == ref_gen
            for d, ref in zip(decs, ref_dec * 2):
                assert_same(d.result(), ref)
    finally:
        sched.stop()
    assert cache.stats.bytes <= cache.limit_bytes and cache.stats.hits > 0


# -- the server ------------------------------------------------------------------------------------------------
def test_server_usage_and_metrics(eng, cache):
    from typedlm.server.app import create_app
    from typedlm.server.state import ServerConfig
    from typedlm.server.testing import live_server

    app = create_app(eng, ServerConfig(max_batch=2, max_queue=8))
    with live_server(app) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        cache.clear()
        msgs = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": u}] for u in USERS[:2]]
        a = client.chat.completions.create(model=eng.name, messages=msgs[0], max_tokens=4, temperature=0)
        b = client.chat.completions.create(model=eng.name, messages=msgs[1], max_tokens=4, temperature=0)
        p0, p1 = (chat_ids(eng, u) for u in USERS[:2])
        assert a.usage.prompt_tokens_details.cached_tokens == 0  # (the warm-up prompt shares no block)
        assert b.usage.prompt_tokens_details.cached_tokens == whole_blocks(lcp(p0, p1)) > 0
        r = client.responses.create(model=eng.name, instructions=SYSTEM, input=USERS[1], max_output_tokens=4)
        assert r.usage.input_tokens_details.cached_tokens > 0
        body = {"schema": SCHEMA, "context": TICKETS[0], "prior": "none"}
        httpx.post(url + "/v1/decide", json=body, timeout=120).raise_for_status()
        d = httpx.post(url + "/v1/decide", json={**body, "context": TICKETS[1]}, timeout=120).json()
        assert d["usage"]["cached_prompt_tokens"] > 0
        text = httpx.get(url + "/metrics").text
        got = {m: float(v) for m, v in re.findall(r"^(typedlm_prefix_cache_\w+) ([0-9.e+-]+)$", text, re.M)}
        assert got["typedlm_prefix_cache_hits_total"] >= 3 and got["typedlm_prefix_cache_misses_total"] >= 1
        assert got["typedlm_prefix_cache_cached_tokens_total"] >= b.usage.prompt_tokens_details.cached_tokens
        assert got["typedlm_prefix_cache_bytes"] == cache.stats.bytes > 0
        assert "typedlm_prefix_cache_evictions_total" in got


def test_serve_setting_from_flag_env_and_its_bad_value():
    from typedlm.server.config import ConfigError, resolve_settings

    assert resolve_settings({}, env={"TYPEDLM_PREFIX_CACHE_GB": "0.5"}).prefix_cache_gb == 0.5
    assert resolve_settings({"prefix_cache_gb": 0.0}, env={}).prefix_cache_gb == 0.0
    assert resolve_settings({}, env={}).prefix_cache_gb is None  # the device's default
    with pytest.raises(ConfigError, match="prefix-cache-gb"):
        resolve_settings({"prefix_cache_gb": -1.0}, env={})


def test_prefix_reuse_stages_host_lists_through_device_tensor():
    """A ``torch.tensor(..., device=)`` or ``.to(device)`` of a host tensor copies from pageable memory, which on CUDA
    waits for every queued kernel: the prefix-cache modules go through ``runner.tensors`` like the rest of the runner."""
    import ast
    import inspect

    import typedlm.runner.prefix_cache as pc
    import typedlm.runner.prefix_reuse as pr

    for mod in (pc, pr):
        for node in ast.walk(ast.parse(inspect.getsource(mod))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert not (node.func.attr in ("tensor", "as_tensor") and any(k.arg == "device" for k in node.keywords)), \
                    (mod.__name__, node.lineno)
                assert node.func.attr != "to", (mod.__name__, node.lineno)


def test_a_view_cache_holds_the_kv_as_is_and_grows_like_an_updated_one(monkeypatch):
    """``to_hf(copy=False)``: the layers are views of the prefix's KV (no kernel), and a later update grows them as in
    a cache filled through ``update`` (the fallback, taken where the layers cannot be made directly)."""
    from typedlm.runner import prefix_cache as pc

    kv = torch.randn(3, 2, 2, 5, 4)
    new = torch.randn(1, 2, 2, 4)

    def check(cache):
        assert len(cache) == 3 and cache.get_seq_length() == 5
        assert cache.layers[1].keys.data_ptr() == kv[1, 0].data_ptr()
        k, v = cache.update(new, new, 1)
        assert torch.equal(k[0], torch.cat([kv[1, 0], new[0]], 1)) and torch.equal(v[0], torch.cat([kv[1, 1], new[0]], 1))
        assert cache.get_seq_length(1) == 7 and cache.get_seq_length(0) == 5

    assert pc._made_layers([(kv[0, 0][None], kv[0, 1][None])], 5) is not None  # this version: made directly
    check(pc.to_hf(kv, copy=False))
    monkeypatch.setattr(pc, "_made_layers", lambda layers, length: None)
    check(pc.to_hf(kv, copy=False))
