"""The MLX backend (``load_engine(..., backend="mlx")``) on the tiny fp32 random model converted to an MLX
engine from its HF directory: the same greedy tokens, grammar validity, KV contract and decisions as the
torch backend on the same weights. Skipped only where mlx-lm is not installed (``make test`` installs it)."""

import json

import jsonschema
import numpy as np
import pytest
import torch

pytest.importorskip("mlx_lm")

from typedlm.decide import TOLERANCE, decide, decide_many  # noqa: E402
from typedlm.config import resolve  # noqa: E402
from typedlm.engine import load_engine, pick_backend  # noqa: E402
from typedlm.errors import ModelLoadError, TypedLMError  # noqa: E402
from typedlm.generate import SamplingParams, build_sequence  # noqa: E402
from typedlm.generate.scheduler import run_batch  # noqa: E402
from typedlm.grammar import make_constraint  # noqa: E402
from typedlm.runner.mlx_kv import to_torch  # noqa: E402

from tests.generate.test_scheduler import PROMPTS, check_valid, constraints  # noqa: E402
from tests.decide.test_api import CTX, SCHEMA, _max_diff  # noqa: E402

JSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                         "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}}},
        "required": ["name", "tags"], "additionalProperties": False}


@pytest.fixture(scope="module")
def mlx_tiny(tiny_dir):
    return load_engine(str(tiny_dir), backend="mlx", progress=False)


@pytest.fixture(scope="module")
def quantized_dir(tiny_dir, tmp_path_factory):
    """A 4-bit MLX checkpoint made from the tiny model by mlx-lm's own convert."""
    from mlx_lm import convert

    out = tmp_path_factory.mktemp("q") / "tiny-4bit"
    convert(str(tiny_dir), mlx_path=str(out), quantize=True, q_bits=4, q_group_size=32)
    return out


def _greedy(engine, prompts, cs, max_batch, *, jump=False, max_tokens=24):
    params = SamplingParams(max_tokens=max_tokens, temperature=0)
    seqs = [build_sequence(engine, engine.encode_prompt(prompt=p), params, c, jump_forward=jump)
            for p, c in zip(prompts, cs)]
    return run_batch(engine, seqs, max_batch=max_batch)


def test_backend_choice():
    assert pick_backend(resolve(env={"TYPEDLM_BACKEND": "mlx"}).backend) == "mlx" and pick_backend("torch") == "torch"
    assert pick_backend(resolve(env={"TYPEDLM_BACKEND": "auto"}).backend) == "torch"  # MLX on Apple Silicon only
    with pytest.raises(ModelLoadError, match="bad backend"):
        pick_backend("jax")


def test_the_mlx_engine_describes_the_model_like_torch(mlx_tiny, tiny):
    assert mlx_tiny.backend == "mlx" and tiny.backend == "torch"
    assert type(mlx_tiny.model).__module__.startswith("mlx_lm.models")
    for attr in ("model_vocab_size", "tokenizer_vocab_size", "stop_ids", "max_context", "dtype",
                 "kv_bytes_per_token", "attn_heads"):
        assert getattr(mlx_tiny, attr) == getattr(tiny, attr), attr


def test_blas_layout_transposes_the_weights_and_keeps_the_logits(tiny_dir):
    """On the CPU every float32 Linear / Embedding weight is the transposed view of an ``[in, out]`` array
    (what mlx's BLAS reads without a transpose flag); the logits equal mlx-lm's own load of the same
    directory (prefill of two rows, then a one-token step: the sgemm and sgemv paths)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    from typedlm.runner.mlx_runner import load_model

    ours, _ = load_model(str(tiny_dir))
    ref, _ = load(str(tiny_dir))
    weights = [m.weight for _, m in ours.named_modules() if type(m) in (nn.Linear, nn.Embedding)]
    assert weights and all(memoryview(w).strides == (4, 4 * w.shape[0]) for w in weights)
    assert all(memoryview(m.weight).strides[1] == 4 for _, m in ref.named_modules() if type(m) is nn.Linear)
    ids = mx.array([[5, 9, 400, 17, 3], [8, 8, 1, 2, 6000]])
    caches = make_prompt_cache(ours), make_prompt_cache(ref)
    for feed in (ids, ids[:, -1:]):
        a, b = ours(feed, cache=caches[0]), ref(feed, cache=caches[1])
        assert a.shape == b.shape and mx.allclose(a, b, rtol=0, atol=1e-5).item()


def test_the_lm_head_runs_apart_only_where_the_model_is_body_then_head(mlx_tiny):
    """mlx-lm's Llama is ``model.model`` then ``lm_head``: the runner splits it (the head only at picked
    positions); a model doing anything after its head (a scale, a softcap) is called whole."""
    import mlx.core as mx
    import mlx.nn as nn

    from typedlm.runner.mlx_runner import body_and_head

    assert body_and_head(mlx_tiny.model) is not None and mlx_tiny.runner.keeps_logits

    class Scaled(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model, self.lm_head = inner.model, inner.lm_head

        def __call__(self, x, cache=None):
            return 30.0 * mx.tanh(self.lm_head(self.model(x, cache=cache)) / 30.0)

    assert body_and_head(Scaled(mlx_tiny.model)) is None


@pytest.mark.parametrize("max_batch", [1, 3, 8])
def test_greedy_batched_tokens_equal_the_torch_backend(mlx_tiny, tiny, max_batch):
    """Free, JSON Schema, regex, choice and JSON rows of different prompt lengths joining and leaving a
    continuous batch: the same tokens as torch on the same fp32 weights, and valid under each constraint."""
    cs = constraints()
    ours = _greedy(mlx_tiny, PROMPTS, cs, max_batch)
    ref = _greedy(tiny, PROMPTS, cs, max_batch)
    for a, b, c in zip(ours, ref, cs):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        check_valid(c, a.text)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_rows_ending_together_run_no_forward_after_their_last_token(mlx_tiny, tiny, monkeypatch, backend):
    """Three free rows reaching ``max_tokens`` at the same step: prefill + ``max_tokens - 1`` batch
    forwards, none queued after the last tokens (the overlap branch only runs when a row goes on)."""
    eng = mlx_tiny if backend == "mlx" else tiny
    calls = []
    for name in ("run", "step_ids"):  # host feeds, or the sampled ids on the device (torch static KV)
        if hasattr(eng.runner, name):
            real = getattr(eng.runner, name)
            monkeypatch.setattr(eng.runner, name, lambda kv, feeds, *a, real=real, **k:
                                calls.append(len(feeds)) or real(kv, feeds, *a, **k))
    out = _greedy(eng, ["one", "two two", "three"], [None] * 3, 3, max_tokens=5)
    assert [len(r.token_ids) for r in out] == [5] * 3 and calls == [3] * 4


def test_jump_forward_on_mlx_equals_its_run_without_and_torch(mlx_tiny, tiny):
    """Drafts extend several tokens per row and rejected ones are truncated from the MLX KV: output equals
    the run without jump-forward, token for token (it drifts when truncate forgets nothing)."""
    c = make_constraint(json_schema=JSON, any_whitespace=False, engine="xgrammar")  # one engine: handoff's move is timed
    prompts, cs = ["x", "hello there", "JSON please", "free"], [c, c, c, None]
    on = _greedy(mlx_tiny, prompts, cs, 4, jump=True, max_tokens=40)
    off = _greedy(mlx_tiny, prompts, cs, 4, max_tokens=40)
    ref = _greedy(tiny, prompts, cs, 4, jump=True, max_tokens=40)
    for a, b, r in zip(on, off, ref):
        assert a.token_ids == b.token_ids == r.token_ids
    assert sum(r.forced_tokens for r in on) > 0
    assert all(r.schema_valid for r in on[:3])


def _one_row(engine, ids):
    kv = engine.runner.decode_cache(1)
    return to_torch(engine.runner.prefill(kv, [ids], [kv.acquire()])[0])


def test_kv_contract_extend_truncate_release(mlx_tiny):
    """Rows of different lengths, a multi-token extend (one row padded), a per-row truncate and a
    release: each row's next logits equal a fresh single-row run of exactly its tokens; with ``every``, at
    each fed position (a padded position gets no logits: zeros)."""
    r = mlx_tiny.runner
    kv = r.decode_cache(4)
    a, b, c = kv.acquire(), kv.acquire(), kv.acquire()
    ta, tb, tc = [1, 2, 3, 4, 5], [7, 8], [9, 10, 11]
    r.prefill(kv, [ta], [a])
    r.prefill(kv, [tb], [b])
    r.prefill(kv, [tc], [c])
    r.run(kv, [[20, 21, 22], [23], [24, 25]], [a, b, c])
    ta, tb, tc = ta + [20, 21, 22], tb + [23], tc + [24, 25]
    kv.truncate([2, 0, 1], [a, b, c])
    ta, tc = ta[:-2], tc[:-1]
    kv.release(b)
    out = to_torch(r.run(kv, [[30], [31]], [c, a]))
    assert out.shape == (2, mlx_tiny.model_vocab_size)
    for got, ids in ((out[0], tc + [30]), (out[1], ta + [31])):
        torch.testing.assert_close(got, _one_row(mlx_tiny, ids), atol=1e-4, rtol=1e-4)
    tc, ta = tc + [30], ta + [31]
    out = to_torch(r.run(kv, [[40, 41], [42]], [c, a], every=True))  # logits at each fed position only
    assert out.shape == (2, 2, mlx_tiny.model_vocab_size) and not out[1, 1].any()  # a's padding: no lm_head
    for got, ids in ((out[0, 0], tc + [40]), (out[0, 1], tc + [40, 41]), (out[1, 0], ta + [42])):
        torch.testing.assert_close(got, _one_row(mlx_tiny, ids), atol=1e-4, rtol=1e-4)
    with pytest.raises(TypedLMError, match="every held row"):
        r.run(kv, [[1]], [a])


def test_a_quantized_mlx_checkpoint_loads_and_generates_valid_json(quantized_dir):
    assert json.loads((quantized_dir / "config.json").read_text())["quantization"]["bits"] == 4
    e = load_engine(str(quantized_dir), backend="mlx", progress=False)
    c = make_constraint(json_schema=JSON, any_whitespace=False)
    rows = _greedy(e, ["x", "a longer prompt here"], [c, c], 2, max_tokens=60)
    for row in rows:
        assert row.finish_reason == "stop"
        jsonschema.validate(json.loads(row.text), JSON)


@pytest.mark.parametrize("packing", ["packed", "expand"])
@pytest.mark.parametrize("scoring", ["labels", "slots"])
def test_decisions_equal_the_torch_backend(mlx_tiny, tiny, packing, scoring):
    ref = decide(SCHEMA, CTX, engine=tiny, scoring=scoring, packing=packing)
    d = decide(SCHEMA, CTX, engine=mlx_tiny, scoring=scoring, packing=packing)
    assert d.value_dict() == ref.value_dict() and _max_diff(d, ref) <= TOLERANCE
    one = decide(SCHEMA, CTX, engine=mlx_tiny, scoring=scoring, packing="expand", max_rows=1)
    assert _max_diff(d, one) <= TOLERANCE  # batched vs one row at a time, on MLX


def test_decide_many_on_mlx_equals_torch(mlx_tiny, tiny):
    ctxs = [CTX, "The login page shows error 500 since this morning."]
    for a, b in zip(decide_many(SCHEMA, ctxs, engine=mlx_tiny), decide_many(SCHEMA, ctxs, engine=tiny)):
        assert a.value_dict() == b.value_dict() and _max_diff(a, b) <= TOLERANCE


def test_score_refuses_a_mask_that_is_not_a_token_tree(mlx_tiny):
    r = mlx_tiny.runner
    prefix = r.prefill_prefix([1, 2, 3])
    allow = torch.ones(2, 5, dtype=torch.bool)
    allow[0, 4] = False  # token 0 sees the prefix and itself; token 1 sees 0 and itself: a chain
    logits, _ = r.score([5, 6], prefix, [3, 4], allow, [1])
    torch.testing.assert_close(logits[0], _one_row(mlx_tiny, [1, 2, 3, 5, 6]), atol=1e-4, rtol=1e-4)
    allow[1, 3] = False  # token 1 no longer sees its parent: not expressible as a causal chain
    with pytest.raises(TypedLMError, match="the MLX runner scores token"):
        r.score([5, 6], prefix, [3, 4], allow, [1])


def test_the_server_on_mlx_answers_a_json_schema_chat_completion_and_a_decision(mlx_tiny):
    import httpx
    import openai

    from typedlm.server.app import create_app
    from typedlm.server.state import ServerConfig
    from typedlm.server.testing import live_server

    app = create_app(mlx_tiny, ServerConfig(max_batch=4, max_queue=8, max_tokens_cap=128))
    with live_server(app) as url:
        assert httpx.get(url + "/ready").json()["backend"] == "mlx"
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        r = client.chat.completions.create(
            model=mlx_tiny.name, messages=[{"role": "user", "content": "Give me a record."}], max_tokens=80,
            response_format={"type": "json_schema", "json_schema": {"name": "rec", "schema": JSON, "strict": True}})
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), JSON)
        d = httpx.post(url + "/v1/decide", json={"schema": SCHEMA, "context": CTX}, timeout=120)
        assert d.status_code == 200, d.text
        assert d.json()["value"] == decide(SCHEMA, CTX, engine=mlx_tiny).value_dict()


def test_the_base_package_does_not_import_mlx():
    import subprocess
    import sys

    code = ("import sys, typedlm.engine, typedlm.cli, typedlm.server.app, typedlm.decide.api, typedlm.generate.api; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- the MLX sampler (the logits pipeline on the device) ---------------------------------------------------
def _mlx_sampler(V, TOK_V, rows, slots):
    from typedlm.generate.mlx_sampler import MLXSampler

    from tests.generate.test_sampling import _seq

    sampler = MLXSampler(max_batch=9, vocab_size=V, tokenizer_vocab_size=TOK_V, device=torch.device("cpu"))
    seqs = [_seq(p, prompt=(5 + i, 7, 11)) for i, p in enumerate(rows)]
    for s, seq in zip(slots, seqs):
        sampler.admit(s, seq)
    return sampler, seqs


@pytest.mark.parametrize("head", [4, 64, 1024])
def test_mlx_pipeline_keeps_what_the_reference_keeps(monkeypatch, head):
    """The device pipeline (temperature, top-k, top-p, padded ids) keeps exactly the ids the per-row torch
    reference keeps, on flat and peaked logits, whether the cut is found in the partitioned head (``head``
    64) or the whole row is sorted (``head`` 4: every nucleus is wider; 1024 > V)."""
    import mlx.core as mx

    from tests.support import reference_loop
    from typedlm.generate import mlx_sampler
    from typedlm.generate.mlx_sampler import torch_only

    from tests.generate.test_sampling import PARAMS, TOK_V, V, _seq

    monkeypatch.setattr(mlx_sampler, "HEAD", head)
    kept = []
    monkeypatch.setattr(reference_loop, "sample", lambda work, p, g: kept.append(torch.isfinite(work)) or 0)
    rows = [p for p in PARAMS if not torch_only(p)]
    slots = [6, 0, 3, 1, 7, 2, 5, 8, 4][: len(rows)]
    torch.manual_seed(0)
    for scale in (1.0, 3.0, 12.0):
        logits = torch.randn(len(rows), V) * scale
        sampler, seqs = _mlx_sampler(V, TOK_V, rows, slots)
        ours = np.isfinite(np.array(sampler._process_mx(mx.array(logits.numpy()), seqs, slots)))
        kept.clear()
        for i, p in enumerate(rows):
            reference_loop.select(_seq(p), logits[i].clone())
        assert np.array_equal(ours, torch.stack(kept).numpy()), scale


def test_mlx_seeded_rows_draw_what_they_draw_alone():
    """Over 12 steps in scattered slots (device path, and the torch-stage path when a row has a penalty or
    a logit_bias): greedy rows equal the per-row reference token for token; every sampled token is one the
    reference keeps; a seeded row draws the same tokens alone in slot 0 as in the batch."""
    import mlx.core as mx

    from tests.support import reference_loop
    from typedlm.generate.mlx_sampler import torch_only

    from tests.generate.test_sampling import PARAMS, TOK_V, V, _seq

    slots = [6, 0, 3, 1, 7, 2, 5, 8, 4]
    for rows in ([p for p in PARAMS if not torch_only(p)], PARAMS):
        torch.manual_seed(0)
        logits = torch.randn(12, len(rows), V) * 3
        sampler, seqs = _mlx_sampler(V, TOK_V, rows, slots[: len(rows)])
        alone = [_mlx_sampler(V, TOK_V, [p], [0]) for p in rows]
        refs = [_seq(p, prompt=(5 + i, 7, 11)) for i, p in enumerate(rows)]
        for step in range(12):
            toks = sampler.finish(sampler.sample(mx.array(logits[step].numpy()), seqs, slots[: len(rows)]), seqs)
            for i, (seq, ref, t) in enumerate(zip(seqs, refs, toks)):
                kept = []
                orig = reference_loop.sample
                reference_loop.sample = lambda work, p, g: kept.append(work) or orig(work, p, g)
                try:
                    want = reference_loop.select(ref, logits[step, i].clone())
                finally:
                    reference_loop.sample = orig
                assert (t == want) if rows[i].greedy else bool(torch.isfinite(kept[0][t])), (step, rows[i])
                s1, (q,) = alone[i]
                assert s1.finish(s1.sample(mx.array(logits[step, i: i + 1].numpy()), [q], [0]), [q]) == [t]
                for x in (seq, ref, q):
                    x.output_ids.append(t)


def test_mlx_draws_follow_the_distribution():
    """Gumbel-max draws: 1,024 seeded rows (one key each) and 1,024 unseeded ones over four ids: each
    frequency within 0.04 of softmax(logits / temperature)."""
    import mlx.core as mx

    from typedlm.generate.mlx_sampler import MLXSampler

    from tests.generate.test_sampling import _seq

    V, n = 8, 1024
    row = torch.tensor([0.0, 1.0, 2.0, 2.5] + [-1e9] * 4)
    want = torch.softmax(row / 0.8, dim=0)[:4]
    for seed in (lambda i: i, lambda i: None):
        params = [SamplingParams(temperature=0.8, seed=seed(i)) for i in range(n)]
        sampler = MLXSampler(max_batch=n, vocab_size=V, tokenizer_vocab_size=V, device=torch.device("cpu"))
        seqs = [_seq(p) for p in params]
        for i, q in enumerate(seqs):
            sampler.admit(i, q)
        toks = sampler.finish(sampler.sample(mx.array(row.expand(n, V).numpy()), seqs, list(range(n))), seqs)
        freq = torch.bincount(torch.tensor(toks), minlength=V)[:4] / n
        assert torch.allclose(freq, want, atol=0.04), (freq, want)


def test_mlx_sampled_grammar_rows_are_valid_and_seeded_per_row(mlx_tiny):
    """Seeded sampling (temperature, top-k, top-p) under grammars on the device: valid, and each row draws in
    a batch of 4 what it draws alone (per-row MLX keys; the torch backend's seeded samples differ: its rows
    draw from torch generators); a top-k that removes every allowed id falls back to the grammar."""
    import re

    from typedlm.generate import generate

    cs = constraints()
    samples = [SamplingParams(max_tokens=40, temperature=t, top_k=k, top_p=p, seed=i)
               for i, (t, k, p) in enumerate([(0.8, 0, 1.0), (1.3, 20, 1.0), (1.0, 0, 0.7), (0.6, 50, 0.9)] * 3)]

    def seqs():
        return [build_sequence(mlx_tiny, mlx_tiny.encode_prompt(prompt=p), sp, c) for p, c, sp in zip(PROMPTS, cs, samples)]

    batched = run_batch(mlx_tiny, seqs(), max_batch=4)
    alone = [run_batch(mlx_tiny, [s], max_batch=1)[0] for s in seqs()]
    for a, b, c in zip(batched, alone, cs):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        if a.finish_reason == "stop":
            check_valid(c, a.text)
    assert len({tuple(r.token_ids) for r in batched}) > 6
    r = generate("x", engine=mlx_tiny, regex=r"[0-9]{4}", top_k=1, seed=0, temperature=1.0)
    assert re.fullmatch(r"[0-9]{4}", r.text) and r.truncation_fallbacks >= 1


# -- stop strings, logprobs, tools and reasoning through the server on MLX ---------------------------------
@pytest.fixture(scope="module")
def mlx_client(mlx_tiny):
    import openai

    from typedlm.server.app import create_app
    from typedlm.server.state import ServerConfig
    from typedlm.server.testing import live_server

    with live_server(create_app(mlx_tiny, ServerConfig(max_batch=4, max_queue=8, max_tokens_cap=200))) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=180)


def test_stop_strings_and_logprobs_on_mlx_equal_torch(mlx_client, mlx_tiny, tiny, tiny_url):
    """A stop string cuts the text (streamed too); greedy, logprobs of the chosen tokens and the top-3
    alternatives equal the torch backend's on the same weights (tolerance 1e-3 nats)."""
    import openai

    from typedlm.generate import generate

    assert generate("x", engine=mlx_tiny, choice=["hello world, again"], stop=["o w"]).text == "hell"
    msg = [{"role": "user", "content": "Say hello."}]
    kw = dict(messages=msg, max_tokens=12, temperature=0, logprobs=True, top_logprobs=3)  # seeded draws differ
    torch_client = openai.OpenAI(base_url=tiny_url + "/v1", api_key="unused", max_retries=0, timeout=180)
    ours, ref = (c.chat.completions.create(model=e.name, **kw).choices[0]
                 for c, e in ((mlx_client, mlx_tiny), (torch_client, tiny)))
    assert ours.message.content == ref.message.content
    for a, b in zip(ours.logprobs.content, ref.logprobs.content, strict=True):
        assert a.token == b.token and abs(a.logprob - b.logprob) < 1e-3
        assert [t.token for t in a.top_logprobs] == [t.token for t in b.top_logprobs]
        assert all(abs(x.logprob - y.logprob) < 1e-3 for x, y in zip(a.top_logprobs, b.top_logprobs))
    stop = dict(model=mlx_tiny.name, messages=msg, max_tokens=40, seed=0, extra_body={"guided_choice": ["hello world, again"]},
                stop=["o w"])
    assert mlx_client.chat.completions.create(**stop).choices[0].message.content == "hell"
    streamed = "".join(ch.choices[0].delta.content or "" for ch in mlx_client.chat.completions.create(**stop, stream=True)
                       if ch.choices)
    assert streamed == "hell"


def test_a_required_tool_call_on_mlx_equals_torch(mlx_client, mlx_tiny, tiny, tiny_url):
    import openai

    from tests.server.test_tools import MSG, SCHEMAS, TOOLS

    kw = dict(messages=MSG, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=120,
              temperature=0)  # greedy: seeded draws differ between the backends
    torch_client = openai.OpenAI(base_url=tiny_url + "/v1", api_key="unused", max_retries=0, timeout=180)
    ours, ref = (c.chat.completions.create(model=e.name, **kw).choices[0]
                 for c, e in ((mlx_client, mlx_tiny), (torch_client, tiny)))
    assert ours.finish_reason == "tool_calls" and len(ours.message.tool_calls) == 1
    call = ours.message.tool_calls[0].function
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    assert (call.name, call.arguments) == (ref.message.tool_calls[0].function.name,
                                           ref.message.tool_calls[0].function.arguments)


def test_reasoning_budget_then_the_grammar_on_mlx(tmp_path):
    """A Qwen3-style tiny model saved and loaded on MLX: the budget forces ``</think>``, the schema applies
    after it (``logit_bias`` takes the torch pipeline, the rest the device one)."""
    import openai

    from typedlm.server.app import create_app
    from typedlm.server.state import ServerConfig
    from typedlm.server.testing import live_server
    from typedlm.testing import save_tiny, tiny_reasoning_engine

    from tests.generate.test_reasoning import MSG, POINT, RF

    eng = load_engine(save_tiny(tmp_path / "reasoning", tiny_reasoning_engine()), backend="mlx", progress=False)
    end = str(eng.reasoning.end_ids[0])
    with live_server(create_app(eng, ServerConfig(max_batch=2, max_tokens_cap=200))) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=180)
        r = client.chat.completions.create(model=eng.name, messages=MSG, response_format=RF, max_tokens=200, seed=0,
                                           logit_bias={end: -100}, extra_body={"max_reasoning_tokens": 12})
        free = client.chat.completions.create(model=eng.name, messages=MSG, response_format=RF, max_tokens=200,
                                              seed=0, extra_body={"max_reasoning_tokens": 8})
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] and r.usage.completion_tokens_details.reasoning_tokens == 13
    jsonschema.validate(json.loads(msg.content), POINT)
    assert free.usage.completion_tokens_details.reasoning_tokens <= 9
    jsonschema.validate(json.loads(free.choices[0].message.content), POINT)


# -- --backend on the CLIs, torch-only uses of engine.model ----------------------------------------------
def test_decide_cli_with_backend_mlx_equals_the_api(mlx_tiny, tiny_dir, tmp_path):
    from typer.testing import CliRunner

    from typedlm.cli import app

    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    r = CliRunner().invoke(app, ["decide", "--schema", str(path), "--model", str(tiny_dir), "--backend", "mlx", "--context", CTX,
                                 "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["value"] == decide(SCHEMA, CTX, engine=mlx_tiny).value_dict()
    bad = CliRunner().invoke(app, ["decide", "--schema", str(path), "--model", str(tiny_dir), "--backend", "jax", "--context", CTX])
    assert bad.exit_code == 2 and "backend='jax'" in bad.stderr and "'torch' or 'mlx'" in bad.stderr


def test_torch_only_uses_of_the_model_refuse_or_work_on_mlx(mlx_tiny, tiny, tmp_path):
    """``save_tiny`` and the HF generate baseline refuse an MLX engine by name; eval's model hash works on both
    backends (and differs between them: dtype names are the framework's)."""
    from typedlm.bench.gen import run_hf
    from typedlm.eval.provenance import model_sha256
    from typedlm.testing import save_tiny

    with pytest.raises(TypedLMError, match="runs on mlx"):
        save_tiny(tmp_path / "x", mlx_tiny)
    assert "torch backend" in run_hf(mlx_tiny, [1, 2, 3], 1, 2, None)["error"]
    digest = model_sha256(mlx_tiny)
    assert len(digest) == 64 and digest == model_sha256(mlx_tiny) != model_sha256(tiny)
