"""Batch invariance (issue 20): the invariant ops equal torch's within rounding and are bit-identical to
themselves whatever the batch shape; decide's batched passes equal one row per forward bit for bit (fp32,
CPU), for any chunk of rows and any number of contexts sharing a pass; the rescoring fallback is skipped."""

import pytest
import torch
import torch.nn.functional as F

from typedlm.decide import decide, decide_many, presets
from typedlm.decide import ties
from typedlm.runner.invariant import attention as inv_attention
from typedlm.runner.invariant import mode, ops

CONTEXTS = ["My card was charged twice this month and I want my money back.",
            "The app crashes every time I open settings on Android 14.",
            "Could you add dark mode? Otherwise I love the product.",
            "URGENT: our whole team is locked out since this morning, production is down."]


@pytest.fixture(autouse=True, scope="module")
def _invariant_on(tiny):
    """Invariance is off by default on the CPU (its price there); these tests turn it on for the tiny engine."""
    before = tiny.runner.invariant
    assert tiny.runner.set_invariant(True)
    yield
    tiny.runner.set_invariant(before)


def test_default_is_on_for_cuda_only_and_the_env_forces_it(tiny, monkeypatch):
    from typedlm.runner.model_runner import ModelRunner

    def runner():
        return ModelRunner(tiny.runner.model, device=torch.device("cpu"), dtype=torch.float32, max_context=256)

    monkeypatch.delenv("TYPEDLM_BATCH_INVARIANT", raising=False)
    assert not runner().invariant and runner().invariant_reason == "off by default on the CPU"
    monkeypatch.setenv("TYPEDLM_BATCH_INVARIANT", "1")
    assert runner().invariant
    monkeypatch.setenv("TYPEDLM_BATCH_INVARIANT", "0")
    assert runner().invariant_reason == "TYPEDLM_BATCH_INVARIANT=0"


def _rows_alone_equal(fn, x: torch.Tensor, sizes=(1, 2, 7, 64, 65, 130)):
    """fn on every batch of the first ``n`` rows gives each row the bits of that row run alone."""
    alone = torch.cat([fn(x[i:i + 1]) for i in range(x.shape[0])])
    for n in sizes:
        assert torch.equal(fn(x[:n]), alone[:n]), n
    perm = torch.randperm(x.shape[0])
    assert torch.equal(fn(x[perm]), alone[perm])  # any position in the batch
    return alone


def test_linear_is_invariant_and_equals_torch():
    torch.manual_seed(0)
    w, b, x = torch.randn(300, 576), torch.randn(300), torch.randn(130, 576)
    out = _rows_alone_equal(lambda t: ops.linear(t, w, b), x)
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-4, atol=1e-4)
    # the reason the ops exist: torch's own GEMM is not batch-invariant on this CPU
    plain = torch.cat([F.linear(x[i:i + 1], w, b) for i in range(130)])
    assert not torch.equal(F.linear(x, w, b), plain)


def test_rms_norm_and_log_softmax_are_invariant_and_equal_torch():
    torch.manual_seed(1)
    x, w = torch.randn(130, 576), torch.randn(576)
    ref = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    torch.testing.assert_close(_rows_alone_equal(lambda t: ops.rms_norm(t, w, 1e-5), x), ref)
    logits = torch.randn(130, 5000) * 4
    torch.testing.assert_close(_rows_alone_equal(ops.log_softmax, logits), torch.log_softmax(logits, -1),
                               rtol=1e-5, atol=1e-5)


def _sdpa(q, k, v, allow):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allow[:, None]).transpose(1, 2)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_equals_sdpa(causal):
    torch.manual_seed(2)
    b, H, kvh, q, k, d = 2, 6, 2, 70, 200, 16
    Q, K, V = torch.randn(b, H, q, d), torch.randn(b, kvh, k, d), torch.randn(b, kvh, k, d)
    if causal:
        allow = inv_attention.allowed(None, b, q, k, "cpu")
        mask = None
    else:
        allow = torch.rand(b, q, k) < 0.3
        allow[..., 0] = True
        mask = allow[:, None]
    out = inv_attention.attention(Q, K, V, mask, d ** -0.5)
    torch.testing.assert_close(out, _sdpa(Q, K, V, allow), rtol=1e-5, atol=1e-5)


def test_attention_depends_only_on_the_visible_keys_in_order():
    """A query's keys spread among other queries' masked keys, or split between a prefix and the pass:
    the same bits as the query alone over exactly its keys."""
    torch.manual_seed(3)
    H, kvh, d, n = 4, 2, 16, 150
    keys, vals, q = torch.randn(1, kvh, n, d), torch.randn(1, kvh, n, d), torch.randn(1, H, 1, d)
    alone = inv_attention.attention(q, keys, vals, None, 0.25)  # one query seeing all n keys
    # the same keys scattered in a longer sequence, beside 9 other queries with random masks
    K = 400
    spots = torch.sort(torch.randperm(K)[:n]).values
    big_k, big_v = torch.randn(1, kvh, K, d), torch.randn(1, kvh, K, d)
    big_k[:, :, spots], big_v[:, :, spots] = keys, vals
    allow = torch.rand(1, 10, K) < 0.5
    allow[0, 7] = False
    allow[0, 7, spots] = True
    qs = torch.randn(1, H, 10, d)
    qs[:, :, 7] = q[:, :, 0]
    out = inv_attention.attention(qs, big_k, big_v, allow[:, None], 0.25)
    assert torch.equal(out[:, 7], alone[:, 0])


def test_rescoring_is_skipped_when_invariant(tiny):
    assert tiny.runner.invariant and ties.drift(tiny) == float("-inf")
    schema = presets.load("support_triage")["schema"]
    d = decide(schema, CONTEXTS[0], engine=tiny)
    assert {f.score_source for f in d.fields.values()} == {"batched"}
    try:
        tiny.runner.set_invariant(False)
        assert ties.drift(tiny) > 0 and tiny.runner.invariant_reason == "switched off"
    finally:
        assert tiny.runner.set_invariant(True)


def _bits(d) -> dict:
    return {n: list(f.log_scores.values()) for n, f in d.fields.items()}


@pytest.fixture(scope="module")
def one_row(tiny):
    schema = presets.load("support_triage")["schema"]
    return schema, decide(schema, CONTEXTS[1], engine=tiny, packing="expand", max_rows=1, prior="none")


@pytest.mark.parametrize("packing,max_rows", [("packed", 1), ("packed", 2), ("packed", 7), ("packed", 64),
                                              ("fused", None), ("expand", 7)])
def test_decide_batched_equals_one_row_bit_for_bit(tiny, one_row, packing, max_rows):
    schema, ref = one_row
    d = decide(schema, CONTEXTS[1], engine=tiny, packing=packing, max_rows=max_rows, prior="none")
    assert _bits(d) == _bits(ref)


@pytest.mark.parametrize("n", [1, 3, 16])
def test_decide_many_equals_solo_bit_for_bit(tiny, n):
    schema = presets.load("content_moderation")["schema"]
    ctxs = [CONTEXTS[i % 4] + f" (ticket {i})" for i in range(n)]
    many = decide_many(schema, ctxs, engine=tiny, packing="packed", prior="none")
    assert n == 1 or many[0].usage["shared_prefix_tokens"] > 0
    for i in sorted({0, n - 1}):  # the first context and the last (the far end of the packed pass)
        solo = decide(schema, ctxs[i], engine=tiny, packing="expand", max_rows=1, prior="none")
        assert _bits(many[i]) == _bits(solo)


def test_invariance_is_per_thread():
    assert not mode.active()
    with mode.enabled():
        assert mode.active()
        seen = []
        mode.bound(lambda: seen.append(mode.active()))()
        assert seen == [True]
    assert not mode.active()


def test_deterministic_switch(tiny):
    """``load_engine(deterministic=)`` / ``--deterministic``: on and off through the engine; asked of a runner
    with no invariant kernels (MLX) it is a named error, never a silent fallback."""
    from types import SimpleNamespace

    from typedlm.engine import set_deterministic
    from typedlm.errors import ModelLoadError
    from typedlm.server.config import resolve_settings

    try:
        assert set_deterministic(tiny, False) is tiny and not tiny.runner.invariant
        assert set_deterministic(tiny, None) is tiny and not tiny.runner.invariant  # None: left as it is
        assert set_deterministic(tiny, True).runner.invariant and ties.drift(tiny) == float("-inf")
    finally:
        tiny.runner.set_invariant(True)
    mlx_like = SimpleNamespace(name="m", runner=SimpleNamespace(backend="mlx"))
    with pytest.raises(ModelLoadError, match="torch backend"):
        set_deterministic(mlx_like, True)
    assert set_deterministic(mlx_like, False) is mlx_like
    assert resolve_settings({}, env={"TYPEDLM_DETERMINISTIC": "0"}).deterministic is False
    assert resolve_settings({}, env={}).deterministic is None


def _greedy_logits(runner, kv, prompts, steps):
    """Greedy decode of ``prompts`` side by side (each prefilled on its own) -> per prompt its logits per step."""
    slots = [kv.acquire() for _ in prompts]
    last = [runner.prefill(kv, [p], [s])[0] for p, s in zip(prompts, slots)]
    seen = [[] for _ in prompts]
    for _ in range(steps):
        for i, lg in enumerate(last):
            seen[i].append(lg.clone())
        out = runner.run(kv, [[int(lg.argmax())] for lg in last], slots)
        last = list(out)
    for s in slots:
        kv.release(s)
    return seen


@pytest.mark.parametrize("dynamic", [False, True])
def test_deterministic_generation_is_batch_invariant_after_slot_reuse(tiny, no_prefix_cache, dynamic):
    """``--deterministic``: a greedy row's logits are the same bits alone and beside other rows in slots that
    held longer sequences before (stale columns, another batch bucket). Without it they differ here by ~1e-5."""
    enc = tiny.tokenizer.encode
    target, other, filler = enc("The quick brown fox jumps over"), enc("Hello there my dear"), enc("a b c d e f g h")
    runner = tiny.runner
    try:
        assert runner.set_deterministic(True)
        kv = runner.decode_cache(4, dynamic=dynamic)
        assert dynamic or kv.invariant
        solo = _greedy_logits(runner, kv, [target], 10)[0]
        _greedy_logits(runner, kv, [filler] * 3, 20)  # the slots now hold 28-token rows
        beside = _greedy_logits(runner, kv, [other, target, filler], 10)[1]
        assert all(torch.equal(a, b) for a, b in zip(solo, beside))
    finally:
        runner.set_deterministic(False)
        assert runner.set_invariant(True)
