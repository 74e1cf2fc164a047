"""Decode-loop invariants (docs/ARCHITECTURE.md, "Decode-loop invariants"). Each test fails without
the invariant it names. All run on the tiny random-weight model: whatever it samples must be valid."""

import json
import re

import jsonschema
import pytest
import torch

from typedlm.errors import TypedLMError
from typedlm.generate import generate
from typedlm.generate.sampler import BatchSampler
from typedlm.grammar.controller import GrammarRow
from typedlm.grammar.spec import MAX_WHITESPACE

SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "kind": {"enum": ["alpha", "beta", "gamma"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 999},
        "tag": {"type": "string", "maxLength": 12},
        "xs": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "maxItems": 3},
    },
    "required": ["ok", "kind", "n", "tag", "xs"],
}


def _token_id(engine, text):
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == 1, (text, ids)
    return ids[0]


def test_mask_is_applied_after_user_processors(tiny):
    """A user processor that pushes a forbidden token to +1e9 cannot get it sampled."""
    banned = _token_id(tiny, "hello")

    def push(ids, logits):
        logits[banned] = 1e9
        return logits

    for seed in range(3):
        r = generate("x", engine=tiny, regex=r"[0-9]{2,6}", seed=seed, logits_processors=[push])
        assert re.fullmatch(r"[0-9]{2,6}", r.text), r.text
        assert banned not in r.token_ids


def test_mask_is_applied_after_repetition_penalty(tiny):
    """A penalty < 1 boosts seen tokens (the prompt is full of letters); the mask still wins."""
    r = generate("abc abc abc abc", engine=tiny, regex=r"[0-9]{3}", repetition_penalty=0.01, seed=1)
    assert re.fullmatch(r"[0-9]{3}", r.text)


def test_matcher_rejection_is_an_error_not_a_silent_continue(tiny, monkeypatch):
    """With the mask disabled the sampler picks tokens the grammar forbids: the row must end with
    finish_reason="error" naming the token, not continue into garbage."""
    monkeypatch.setattr(BatchSampler, "_mask", lambda self, logits, mask, rows: None)
    r = generate("x", engine=tiny, regex=r"[0-9]{8}", seed=0, temperature=1.0)
    assert r.finish_reason == "error"
    assert "grammar rejected sampled token" in r.error
    assert not re.fullmatch(r"[0-9]{8}", r.text)


def test_matcher_accepts_exactly_the_sampled_tokens(tiny, monkeypatch):
    sampled, accepted = [], []
    real_receive, real_accept = BatchSampler.receive, GrammarRow.accept

    def spy_sample(*a, **k):  # every sampled id reaches the host through ``receive``
        toks = real_receive(*a, **k)
        sampled.extend(toks)
        return toks

    def spy_accept(self, tok):
        accepted.append(tok)
        return real_accept(self, tok)

    monkeypatch.setattr(BatchSampler, "receive", spy_sample)
    monkeypatch.setattr(GrammarRow, "accept", spy_accept)
    r = generate("x", engine=tiny, json_schema=SCHEMA, seed=3, max_tokens=300)
    assert sampled == accepted
    assert r.token_ids == [t for t in sampled if t not in tiny.stop_ids]


@pytest.mark.parametrize("device_feed", [True, False])
def test_complete_grammar_stops_without_eos_and_without_another_forward(tiny, monkeypatch, device_feed):
    """The row ends without a step sampling EOS. Host-fed steps spend no forward after the last token; with the
    device feed (static KV) the forward after it was queued before the host saw the token: exactly one more."""
    monkeypatch.setattr(tiny.runner.decode_cache(1), "device_feed", device_feed, raising=False)
    calls, sampled = [], []  # every model pass (prefill or decode, whichever runner) embeds its input ids once
    real_receive = BatchSampler.receive

    def spy(*a, **k):
        ids = real_receive(*a, **k)
        sampled.extend(ids)
        return ids

    monkeypatch.setattr(BatchSampler, "receive", spy)
    hook = tiny.model.get_input_embeddings().register_forward_hook(lambda *a: calls.append(1))
    try:
        r = generate("x", engine=tiny, regex=r"(yes|no)!", seed=0)
    finally:
        hook.remove()
    assert r.text in ("yes!", "no!")
    assert r.finish_reason == "stop"
    assert not set(r.token_ids) & tiny.stop_ids
    assert sampled == r.token_ids  # no step was spent sampling an EOS
    # prefill + one forward per emitted token except the last (+ the device feed's queued one)
    assert len(calls) == len(r.token_ids) + device_feed


def test_max_tokens_one_emits_the_sampled_token(tiny, monkeypatch):
    sampled = []
    real_receive = BatchSampler.receive
    monkeypatch.setattr(BatchSampler, "receive", lambda *a, **k: sampled.extend(real_receive(*a, **k)) or sampled)
    r = generate("x", engine=tiny, json_schema=SCHEMA, max_tokens=1, seed=5)
    assert r.finish_reason == "length"
    assert r.token_ids == sampled and len(sampled) == 1
    assert r.schema_valid is False


def test_json_truncated_mid_object_reports_length(tiny):
    r = generate("x", engine=tiny, json_schema=SCHEMA, max_tokens=6, seed=2, any_whitespace=False)
    assert r.finish_reason == "length" and len(r.token_ids) == 6
    assert r.text.startswith("{") and r.schema_valid is False
    assert any("not JSON" in e for e in r.schema_errors)


def test_padded_vocab_ids_are_never_sampled(tiny):
    assert tiny.model_vocab_size > tiny.tokenizer_vocab_size
    pad = tiny.tokenizer_vocab_size + 7

    def push(ids, logits):
        logits[pad] = 1e9
        return logits

    free = generate("x", engine=tiny, max_tokens=8, seed=0, logits_processors=[push])
    assert free.token_ids and all(t < tiny.tokenizer_vocab_size for t in free.token_ids)
    constrained = generate("x", engine=tiny, json_object=True, max_tokens=8, seed=0, logits_processors=[push])
    assert all(t < tiny.tokenizer_vocab_size for t in constrained.token_ids)


def test_grammar_bitmask_never_allows_padded_ids(tiny):
    from typedlm.grammar import make_constraint

    compiled, _ = tiny.grammars.compile(make_constraint(json_object=True))
    row = GrammarRow(compiled, vocab_size=tiny.model_vocab_size, stop_ids=tiny.stop_ids)
    row.fill()
    logits = torch.zeros(tiny.model_vocab_size)
    row.apply(logits)
    assert torch.isinf(logits[tiny.tokenizer_vocab_size:]).all()


def test_whitespace_is_bounded_20_seeds(tiny):
    """Unbounded whitespace lets a random model emit spaces forever; bounded, it always finishes."""
    for seed in range(20):
        r = generate("x", engine=tiny, json_schema=SCHEMA, max_tokens=1024, seed=seed)
        assert r.finish_reason == "stop", (seed, r.text[-80:])
        assert r.schema_valid, (seed, r.schema_errors)
        jsonschema.validate(json.loads(r.text), SCHEMA)
        outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', r.text)
        assert max((len(m) for m in re.findall(r"\s+", outside)), default=0) <= MAX_WHITESPACE


def test_compact_json_has_no_whitespace(tiny):
    for seed in range(3):
        r = generate("x", engine=tiny, json_schema=SCHEMA, any_whitespace=False, seed=seed, max_tokens=400)
        assert r.schema_valid
        assert not re.search(r"\s", re.sub(r'"(?:[^"\\]|\\.)*"', '""', r.text))


def test_truncation_that_removes_every_allowed_token_falls_back_to_the_grammar(tiny):
    r = generate("x", engine=tiny, regex=r"[0-9]{4}", top_k=1, seed=0, temperature=1.0)
    assert re.fullmatch(r"[0-9]{4}", r.text)
    assert r.truncation_fallbacks >= 1


def test_greedy_equals_argmax_of_masked_logits(tiny):
    r = generate("hello", engine=tiny, max_tokens=1, temperature=0)
    ids = torch.tensor([tiny.encode_prompt(prompt="hello")])
    logits, _ = tiny.runner.forward(ids)
    row = logits[0, -1].float()
    row[tiny.tokenizer_vocab_size:] = float("-inf")
    assert r.token_ids == [int(torch.argmax(row))]


def test_same_seed_same_output(tiny):
    a = generate("x", engine=tiny, json_schema=SCHEMA, seed=11, max_tokens=200)
    b = generate("x", engine=tiny, json_schema=SCHEMA, seed=11, max_tokens=200)
    c = generate("x", engine=tiny, json_schema=SCHEMA, seed=12, max_tokens=200)
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_stop_string_cuts_text(tiny):
    r = generate("x", engine=tiny, choice=["hello world, again"], stop=["o w"])
    assert r.finish_reason == "stop"
    assert r.text == "hell"


def test_result_keys(tiny):
    r = generate("x", engine=tiny, json_object=True, max_tokens=40, seed=0)
    d = r.to_dict()
    assert set(d) == {"text", "token_ids", "finish_reason", "usage", "timings", "constraint", "schema_valid",
                      "schema_errors", "error", "truncation_fallbacks", "reasoning", "reasoning_tokens",
                      "forced_tokens"}
    assert set(d["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens"}
    assert set(d["timings"]) == {"compile", "prefill", "decode", "total"}
    assert d["usage"]["completion_tokens"] == len(d["token_ids"])
    json.dumps(d)


def test_prompt_longer_than_context_is_refused(tiny):
    with pytest.raises(TypedLMError, match="context"):
        generate("word " * (tiny.max_context + 10), engine=tiny, max_tokens=1)


def test_schema_valid_asserts_formats_under_every_draft():
    """A draft-04 ``format: date`` is enforced by the grammar, so the final check asserts it too."""
    from typedlm.generate.result import check_schema

    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "string", "format": "date"}
    assert check_schema('"2024-02-30x"', schema)[0] is False
    assert check_schema('"2024-02-28"', schema)[0] is True
