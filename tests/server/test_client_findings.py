"""What a client matrix run as a new user found (issue 33, item 7), each pinned on a live server (tiny model,
loopback) with the official openai client where it applies: Lark grammars enforced, a prompt over the
context named as such, a body that is not JSON, the Responses params named, an unknown model a 404, the
playground's engine facts and its icon."""

import httpx
import openai
import pytest

from typedlm.server.structured import is_lark

MSG = [{"role": "user", "content": "Answer."}]
LARK = '// a Lark grammar (vLLM and outlines send these)\nstart: answer "!"\nanswer: "yes" | "no"\n'


def _err(r, status=400) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


# -- Lark ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, lark", [
    (LARK, True),
    ("start: /[0-9]+/", True),
    ('root ::= "a" | "b"', False),
    ('# rules: a comment with a colon\nroot ::= "a"', False),
    ('root ::= x\nx ::= "a" # trailing: comment', False),
    ("", False),
])
def test_is_lark_tells_lark_from_ebnf(text, lark):
    assert is_lark(text) is lark


@pytest.mark.parametrize("extra", [{"structured_outputs": {"grammar": LARK}}, {"guided_grammar": LARK}])
def test_a_lark_grammar_is_enforced(tiny_client, model, extra):
    for seed in range(3):
        raw = tiny_client.chat.completions.with_raw_response.create(
            model=model, messages=MSG, max_tokens=8, temperature=1.0, seed=seed, extra_body=extra)
        r = raw.parse()
        assert "warning" not in raw.headers  # constrained, not degraded to free text
        assert r.choices[0].message.content in ("yes!", "no!") and r.choices[0].finish_reason == "stop"


def test_an_ebnf_grammar_still_reads_as_ebnf(tiny_client, model):
    r = tiny_client.completions.create(model=model, prompt="x", max_tokens=4, temperature=1.0, seed=0,
                                       extra_body={"structured_outputs": {"grammar": 'root ::= "ab" | "cd"'}})
    assert r.choices[0].text in ("ab", "cd")


def test_a_bad_lark_grammar_is_a_400_from_the_lark_reader(tiny_url, model):
    body = {"model": model, "messages": MSG, "structured_outputs": {"grammar": "start: undefined_rule"}}
    err = _err(httpx.post(tiny_url + "/v1/chat/completions", json=body, timeout=60))
    assert err["code"] == "grammar_compile_error" and "undefined_rule" in err["message"]
    assert "EBNF" not in err["message"]


# -- prompt over the context -----------------------------------------------------------------------
def test_a_2mb_prompt_names_the_messages(tiny_client, model):
    big = "word " * 400_000  # 2 MB: under the body limit, far over the context
    with pytest.raises(openai.BadRequestError) as e:
        tiny_client.chat.completions.create(model=model, messages=[{"role": "user", "content": big}], max_tokens=16)
    assert e.value.code == "context_length_exceeded" and e.value.param == "messages"
    assert "prompt has" in e.value.message and "max_tokens" not in e.value.message


@pytest.mark.parametrize("path, body, field", [
    ("/v1/completions", {"max_tokens": 16}, "prompt"),
    ("/v1/responses", {"max_output_tokens": 16}, "input"),
    ("/v1/chat/completions", {"max_completion_tokens": 16}, "messages"),
])
def test_a_prompt_over_the_context_names_its_field(tiny_url, tiny, model, path, body, field):
    text = "word " * (tiny.max_context + 10)
    body = {**body, "model": model, field: [{"role": "user", "content": text}] if field == "messages" else text}
    err = _err(httpx.post(tiny_url + path, json=body, timeout=60))
    assert err["code"] == "context_length_exceeded" and err["param"] == field
    assert str(tiny.max_context) in err["message"]


# -- bodies and params -----------------------------------------------------------------------------
@pytest.mark.parametrize("content", [b'{"model": "m", "messages": [}', b'{"model": ', b"not json"])
def test_a_body_that_is_not_json_says_so(tiny_url, content):
    r = httpx.post(tiny_url + "/v1/chat/completions", content=content, headers={"content-type": "application/json"})
    err = _err(r)
    assert err["param"] is None and err["message"].startswith("the request body is not valid JSON")


@pytest.mark.parametrize("inp", [[], ""])
def test_an_empty_responses_input_names_input(tiny_url, model, inp):
    err = _err(httpx.post(tiny_url + "/v1/responses", json={"model": model, "input": inp}, timeout=60))
    assert err["param"] == "input" and "messages" not in err["message"]


@pytest.mark.parametrize("path, extra, param", [
    ("/v1/responses", {"store": True}, "store"),
    ("/v1/responses", {"previous_response_id": "resp_x"}, "previous_response_id"),
    ("/v1/responses", {"top_logprobs": 3}, "top_logprobs"),
    ("/v1/responses", {"include": ["file_search_call.results"]}, "include"),
    ("/v1/chat/completions", {"store": True}, "store"),
    ("/v1/chat/completions", {"best_of": 3}, "best_of"),
])
def test_unsupported_fields_name_their_param(tiny_url, model, path, extra, param):
    body = {"model": model, **({"input": "hi"} if path == "/v1/responses" else {"messages": MSG}), **extra}
    err = _err(httpx.post(tiny_url + path, json=body, timeout=60))
    assert err["param"] == param and err["message"].startswith(param)


def test_an_unknown_model_is_a_404_model_not_found(tiny_client):
    calls = [lambda: tiny_client.chat.completions.create(model="nope", messages=MSG, max_tokens=2),
             lambda: tiny_client.completions.create(model="nope", prompt="x", max_tokens=2),
             lambda: tiny_client.responses.create(model="nope", input="x", max_output_tokens=2),
             lambda: tiny_client.models.retrieve("nope")]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as e:
            call()
        assert e.value.code == "model_not_found" and e.value.param == "model" and "not served" in e.value.message


# -- playground ------------------------------------------------------------------------------------
def test_config_carries_the_loaded_engine(tiny_url, tiny):
    engine = httpx.get(tiny_url + "/v1/config").json()["engine"]
    assert engine == {"model": tiny.name, "device": str(tiny.device), "backend": tiny.backend,
                      "dtype": str(tiny.dtype).removeprefix("torch.")}


def test_the_page_declares_its_icon_and_every_asset_it_names_exists(tiny_url):
    page = httpx.get(tiny_url + "/").text
    assert '<link rel="icon" href="data:,">' in page  # no /favicon.ico request
    for asset in ("/static/style.css", "/static/app.js"):
        assert asset in page and httpx.get(tiny_url + asset).status_code == 200
