"""Incremental detokenizer, linear stop strings, raw token bytes in logprobs, logit_bias."""

import httpx
import openai
import pytest

from typedlm.generate import generate
from typedlm.generate.detokenize import Detokenizer, StreamText, token_bytes
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server

TEXT = "Hi 🙂 there, ünïcödé 🙂🙂 end. STOP here"


def test_incremental_text_equals_full_decode(tiny):
    ids = tiny.tokenizer.encode(TEXT, add_special_tokens=False)
    d = Detokenizer(tiny.tokenizer)
    pieces = [d.add(t) for t in ids]
    assert "".join(pieces) == d.text == tiny.decode(ids) == TEXT
    assert "\ufffd" not in "".join(pieces)  # a partial character is held back, never emitted


def test_stop_string_found_across_token_boundaries(tiny):
    ids = tiny.tokenizer.encode(TEXT, add_special_tokens=False)
    for stop in ("STOP", "🙂🙂", "e, ü", "end. S"):
        d = Detokenizer(tiny.tokenizer, (stop, "never-there"))
        for t in ids:
            d.add(t)
            if d.stop_at is not None:
                break
        assert d.stop_at == TEXT.index(stop), stop


def test_stream_text_never_sends_a_stop_prefix_or_past_it(tiny):
    ids = tiny.tokenizer.encode(TEXT, add_special_tokens=False)
    s = StreamText(tiny.tokenizer, ("STOP",))
    sent = ""
    for t in ids:
        delta = s.add(t)
        sent += delta
        assert "STOP" not in sent and not sent.endswith(("S", "ST", "STO")) or sent == TEXT[: TEXT.index("STOP")]
    assert sent == TEXT[: TEXT.index("STOP")]


class CountingTokenizer:
    """The real tokenizer, counting full ``decode`` calls (the quadratic version decoded every step)."""

    def __init__(self, tok):
        self._tok, self.decodes = tok, 0

    def decode(self, *a, **kw):
        self.decodes += 1
        return self._tok.decode(*a, **kw)

    def __getattr__(self, name):
        return getattr(self._tok, name)


def test_stop_check_does_not_redecode_the_output(tiny):
    """Regression: the stop-string check decoded the whole output at every step (quadratic)."""
    import dataclasses

    counting = CountingTokenizer(tiny.tokenizer)
    eng = dataclasses.replace(tiny, tokenizer=counting)
    r = generate("x", engine=eng, max_tokens=60, seed=3, stop=["never-appears"])
    assert r.completion_tokens == 60
    assert counting.decodes <= 2  # the finalizer's one decode (+ nothing per step)


def test_token_bytes_are_raw_bytes(tiny):
    ids = tiny.tokenizer.encode("🙂", add_special_tokens=False)
    assert len(ids) == 2  # the emoji is split over two byte-level tokens
    raw = [token_bytes(tiny, t) for t in ids]
    assert b"".join(raw) == "🙂".encode()
    assert all(b"\xef\xbf\xbd" not in b for b in raw)  # not U+FFFD's bytes


@pytest.fixture(scope="module")
def server(tiny):
    with live_server(create_app(tiny, ServerConfig(max_batch=4))) as url:
        yield url


def test_logprobs_bytes_of_an_emoji_are_its_utf8(server, tiny):
    """Regression: each token was decoded alone and re-encoded, so 🙂 came back as U+FFFD bytes."""
    body = {"model": tiny.name, "messages": [{"role": "user", "content": "x"}], "max_tokens": 8,
            "temperature": 0, "logprobs": True, "guided_choice": ["🙂"]}
    r = httpx.post(server + "/v1/chat/completions", json=body, timeout=120).json()
    content = r["choices"][0]["logprobs"]["content"]
    assert r["choices"][0]["message"]["content"] == "🙂"
    assert len(content) >= 2  # every spelling of 🙂 in this vocabulary splits the character
    assert bytes(b for c in content for b in c["bytes"]) == "🙂".encode()


def test_logit_bias_changes_the_greedy_choice_but_never_beats_the_grammar(server, tiny):
    client = openai.OpenAI(base_url=server + "/v1", api_key="x", max_retries=0, timeout=120)
    base = dict(model=tiny.name, messages=[{"role": "user", "content": "x"}], max_tokens=3, temperature=0)
    plain = client.chat.completions.create(**base, logprobs=True)
    first = tiny.tokenizer.encode(plain.choices[0].message.content, add_special_tokens=False)[0]
    target = next(t for t in range(1000, 2000) if t != first)
    biased = client.chat.completions.create(**base, logit_bias={str(target): 100})
    assert tiny.tokenizer.encode(biased.choices[0].message.content, add_special_tokens=False)[0] == target
    # applied before the grammar mask: a +100 bias cannot make a forbidden token appear
    yes = tiny.tokenizer.encode("yes", add_special_tokens=False)[0]
    constrained = client.chat.completions.create(**base, logit_bias={str(yes): 100},
                                                 extra_body={"guided_choice": ["no", "maybe"]})
    assert constrained.choices[0].message.content in ("no", "maybe")
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        client.chat.completions.create(**base, logit_bias={"999999": 1})
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        client.chat.completions.create(**base, logit_bias={"5": 101})


def test_streaming_detokenizes_linearly(tiny):
    """Regression (the streaming side): SSE deltas come from the incremental detokenizer, not from
    re-decoding the output each token. A 60-token stream through the official client costs at most
    the finalizer's decode of each route, and the deltas add up to the final text."""
    import dataclasses

    counting = CountingTokenizer(tiny.tokenizer)
    eng = dataclasses.replace(tiny, tokenizer=counting)
    with live_server(create_app(eng, ServerConfig())) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)
        counting.decodes = 0
        chunks = list(client.chat.completions.create(model=eng.name, messages=[{"role": "user", "content": "x"}],
                                                     max_tokens=60, seed=3, stream=True))
        chat_decodes = counting.decodes
        counting.decodes = 0
        text = "".join(c.choices[0].text for c in client.completions.create(
            model=eng.name, prompt="x", max_tokens=60, seed=3, stream=True) if c.choices)
        completion_decodes = counting.decodes
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed and text
    assert 1 <= chat_decodes <= 2 and 1 <= completion_decodes <= 2  # counted: the finalizer decodes once
