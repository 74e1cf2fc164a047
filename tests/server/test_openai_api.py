"""The OpenAI-compatible server, live on loopback, driven by the official ``openai`` client (and raw
httpx where the wire itself is the subject: headers, SSE framing, malformed bodies)."""

import concurrent.futures
import json
import re
import time

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from typedlm import config
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
FLAGS = {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4}
COLOR = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"],
         "additionalProperties": False}
POINT = {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
                                          "y": {"type": "integer", "minimum": -9, "maximum": 9}},
         "required": ["x", "y"], "additionalProperties": False}
# not over a pattern has no exact form (the complement of a regular language inside JSON strings)
REFUSED = {"type": "object", "properties": {"a": {"type": "integer", "not": {
    "anyOf": [{"const": 3}, {"type": "string", "format": "idn-email"}]}}}, "required": ["a"]}
MSG = [{"role": "user", "content": "Give me the data."}]


class Person(BaseModel):
    name: str = Field(max_length=8)
    age: int = Field(ge=0, le=120)


@pytest.fixture(scope="module")
def server(tiny):
    app = create_app(tiny, ServerConfig(max_batch=4, max_queue=32, max_body_bytes=64 * 1024,
                                        max_prompt_tokens=512, max_tokens_cap=256))
    with live_server(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0, timeout=120)


def post(server, path, body, timeout=120, **kw):
    return httpx.post(server[0] + path, json=body, timeout=timeout, **kw)


def metric(server, name, labels=""):
    text = httpx.get(server[0] + "/metrics").text
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


# -- basics ---------------------------------------------------------------------------------------
def test_models_health_ready(server, client, model):
    assert [m.id for m in client.models.list().data] == [model]
    assert httpx.get(server[0] + "/health").json() == {"status": "ok"}
    assert httpx.get(server[0] + "/ready").json()["status"] == "ready"


def test_chat_and_completion(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=7, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7 and r.usage.prompt_tokens > 0
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    again = client.chat.completions.create(model=model, messages=MSG, max_completion_tokens=7, temperature=0)
    assert again.choices[0].message.content == r.choices[0].message.content  # greedy: deterministic
    c = client.completions.create(model=model, prompt="Once upon a time", max_tokens=5, temperature=0)
    assert c.object == "text_completion" and c.usage.completion_tokens == 5 and c.choices[0].text


def test_request_id_echoed_or_generated(server, model):
    r = post(server, "/v1/chat/completions", {"model": model, "messages": MSG, "max_tokens": 1},
             headers={"X-Request-Id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert re.fullmatch(r"[0-9a-f]{32}", httpx.get(server[0] + "/health").headers["x-request-id"])


def test_stream_chat_with_usage_and_done(server, client, model):
    full = client.chat.completions.create(model=model, messages=MSG, max_tokens=12, temperature=0)
    stream = client.chat.completions.create(model=model, messages=MSG, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    with httpx.stream("POST", server[0] + "/v1/chat/completions", timeout=60,
                      json={"model": model, "messages": MSG, "max_tokens": 3, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]" and all(ln.startswith("data: ") for ln in lines)


def test_stream_completion(client, model):
    full = client.completions.create(model=model, prompt="Hi there", max_tokens=9, temperature=0)
    parts = list(client.completions.create(model=model, prompt="Hi there", max_tokens=9, temperature=0,
                                           stream=True))
    assert "".join(p.choices[0].text for p in parts if p.choices) == full.choices[0].text


def test_logprobs(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=4, temperature=0, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 4 and "".join(c.token for c in content) == r.choices[0].message.content
    for c in content:
        assert len(c.top_logprobs) == 3 and c.logprob <= 0
        assert c.top_logprobs[0].logprob == pytest.approx(c.logprob)  # greedy picks the top raw token
    c = client.completions.create(model=model, prompt="Hi", max_tokens=3, temperature=0, logprobs=2)
    assert len(c.choices[0].logprobs.tokens) == 3 and len(c.choices[0].logprobs.top_logprobs[0]) == 2


def test_n_choices_with_seed(client, model):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=6, n=3, seed=7,
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "p", "schema": POINT, "strict": True}})
    assert [c.index for c in r.choices] == [0, 1, 2]
    r2 = client.chat.completions.create(model=model, messages=MSG, max_tokens=6, n=3, seed=7,
                                        response_format={"type": "json_schema", "json_schema": {
                                            "name": "p", "schema": POINT, "strict": True}})
    assert [c.message.content for c in r.choices] == [c.message.content for c in r2.choices]


# -- structured outputs ---------------------------------------------------------------------------
def test_parse_pydantic(client, model):
    r = client.chat.completions.parse(model=model, messages=MSG, response_format=Person, temperature=1.0)
    p = r.choices[0].message.parsed
    assert isinstance(p, Person) and r.choices[0].finish_reason == "stop"


def _check_finished(kind, finish_reason, text):
    """A free JSON object has no length bound: a random model may hit max_tokens inside a string.
    Every other constraint here is bounded and must complete."""
    if "json_object" in kind and finish_reason == "length":
        assert text.startswith("{")
        return
    assert finish_reason == "stop", text
    _check(kind, text)


def _check(kind, text):
    if kind in ("json_schema", "structured_json", "guided_json"):
        jsonschema.validate(json.loads(text), PERSON)
    elif kind in ("json_object", "structured_json_object"):
        assert isinstance(json.loads(text), dict)
    elif kind in ("regex", "guided_regex"):
        assert re.fullmatch(r"[A-Z]{3}-\d{2}", text), text
    elif kind in ("choice", "guided_choice"):
        assert text in ("alpha", "beta gamma")
    elif kind in ("grammar", "guided_grammar"):
        assert text in ("ping", "pong")
    elif kind in ("structural_tag", "structured_structural_tag"):
        m = re.fullmatch(r"<p>(.*)</p>", text, re.S)
        assert m, text
        jsonschema.validate(json.loads(m.group(1)), POINT)
    else:
        raise AssertionError(kind)


TAG = {"type": "structural_tag", "format": {"type": "tag", "begin": "<p>", "end": "</p>",
                                            "content": {"type": "json_schema", "json_schema": POINT}}}
GRAMMAR = 'root ::= "ping" | "pong"'
FIELDS = {
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                                              "strict": True}}},
    "json_object": {"response_format": {"type": "json_object"}},
    "structural_tag": {"response_format": TAG},
    "structured_json": {"structured_outputs": {"json": PERSON, "disable_any_whitespace": True}},
    "structured_json_object": {"structured_outputs": {"json_object": True}},
    "regex": {"structured_outputs": {"regex": r"[A-Z]{3}-\d{2}"}},
    "choice": {"structured_outputs": {"choice": ["alpha", "beta gamma"]}},
    "grammar": {"structured_outputs": {"grammar": GRAMMAR}},
    "structured_structural_tag": {"structured_outputs": {"structural_tag": TAG}},
    "guided_json": {"guided_json": PERSON},
    "guided_regex": {"guided_regex": r"[A-Z]{3}-\d{2}"},
    "guided_choice": {"guided_choice": ["alpha", "beta gamma"]},
    "guided_grammar": {"guided_grammar": GRAMMAR},
}


@pytest.mark.parametrize("kind", sorted(FIELDS))
def test_each_structured_field(client, model, kind):
    extra = dict(FIELDS[kind])
    rf = extra.pop("response_format", openai.NOT_GIVEN)
    max_tokens = 40 if "json_object" in kind else 200  # unbounded: keep the test short
    raw = client.chat.completions.with_raw_response.create(model=model, messages=MSG, max_tokens=max_tokens,
                                                           temperature=1.0, seed=3, response_format=rf,
                                                           extra_body=extra or None)
    r = raw.parse()
    _check_finished(kind, r.choices[0].finish_reason, r.choices[0].message.content)
    assert "warning" not in raw.headers
    assert raw.headers["x-typedlm-constraint"]


def test_structured_completions_endpoint(client, model):
    r = client.completions.create(model=model, prompt="Code:", max_tokens=50, extra_body={"guided_regex": r"[A-Z]{3}-\d{2}"})
    _check("regex", r.choices[0].text)


# precedence: guided_grammar > json_schema > json_object > structured_outputs > guided_regex > guided_choice
CHAIN = [("guided_grammar", {"guided_grammar": GRAMMAR}, "grammar"),
         ("json_schema", FIELDS["json_schema"], "json_schema"),
         ("json_object", FIELDS["json_object"], "json_object"),
         ("structured_outputs", {"structured_outputs": {"choice": ["alpha", "beta gamma"]}}, "choice"),
         ("guided_regex", FIELDS["guided_regex"], "regex"),
         ("guided_choice", {"guided_choice": ["alpha", "beta gamma"]}, "choice")]


@pytest.mark.parametrize("hi", range(len(CHAIN) - 1))
def test_precedence(server, model, hi):
    """Every field below the winner is present too; the winner decides the output."""
    body = {"model": model, "messages": MSG, "max_tokens": 40 if CHAIN[hi][2] == "json_object" else 200, "seed": 1}
    for _, fields, _ in CHAIN[hi:]:
        for k, v in fields.items():
            body.setdefault(k, v)  # json_schema and json_object share the response_format key
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    name, _, kind = CHAIN[hi]
    assert r.headers["x-typedlm-constraint"] == name
    choice = r.json()["choices"][0]
    _check_finished(kind, choice["finish_reason"], choice["message"]["content"])


def test_guided_json_ranks_with_json_schema(server, model):
    body = {"model": model, "messages": MSG, "max_tokens": 200, "guided_json": PERSON,
            "response_format": {"type": "json_object"}, "guided_regex": "x"}
    r = post(server, "/v1/chat/completions", body)
    assert r.headers["x-typedlm-constraint"] == "json_schema"
    _check("json_schema", r.json()["choices"][0]["message"]["content"])


# -- errors -----------------------------------------------------------------------------------------
def _err(r, status=400):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


@pytest.mark.parametrize("body,needle", [
    ({"messages": MSG}, "model"),
    ({"model": "M", "messages": "hi"}, "messages"),
    ({"model": "M", "messages": MSG, "max_tokens": "ten"}, "max_tokens"),
    ({"model": "M", "messages": MSG, "temperature": 5}, "temperature"),
    ({"model": "M", "messages": MSG, "tools": []}, "tools"),
    ({"model": "M", "messages": MSG, "frequency_penalty": 0.5}, "frequency_penalty"),
    ({"model": "M", "messages": MSG, "top_logprobs": 2}, "logprobs"),
    ({"model": "M", "messages": MSG, "n": 99}, "n"),
    ({"model": "M", "messages": MSG, "response_format": {"type": "xml"}}, "response_format.type"),
    ({"model": "M", "messages": MSG, "response_format": {"type": "json_schema"}}, "json_schema"),
    ({"model": "M", "messages": MSG, "response_format": {"type": "json_schema", "json_schema": {
        "name": "r", "schema": REFUSED, "strict": True}}}, "not"),
    ({"model": "M", "messages": MSG, "guided_json": REFUSED}, "not"),
    ({"model": "M", "messages": MSG, "guided_regex": "(?<=a)b"}, "regex"),
    ({"model": "M", "messages": MSG, "guided_choice": []}, "empty"),
    ({"model": "M", "messages": MSG, "guided_grammar": "root ::= nothing_defined"}, "grammar"),
    ({"model": "M", "messages": MSG, "structured_outputs": {"regex": "a", "choice": ["b"]}}, "not several"),
    ({"model": "M", "messages": MSG, "structured_outputs": {"jsn": {}}}, "jsn"),
    ({"model": "M", "messages": MSG, "structured_outputs": {}}, "names no constraint"),
    ({"model": "M", "messages": MSG, "response_format": {"type": "structural_tag"}}, "structural_tag"),
    ({"model": "M", "messages": [{"role": "user", "content": "word " * 2000}]}, "at most 512"),
    ({"model": "M", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "image_url"),
    ({"model": "M", "messages": MSG, "prompt": "x"}, "prompt"),
])
def test_400_cases(server, model, body, needle):
    body = {**body, "model": model} if body.get("model") == "M" else body
    err = _err(post(server, "/v1/chat/completions", body))
    assert needle in err["message"] + str(err["param"])


def test_400_malformed_json_and_completion_batches(server, model):
    r = httpx.post(server[0] + "/v1/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"})
    _err(r)
    _err(post(server, "/v1/completions", {"model": model, "prompt": ["a", "b"]}))
    _err(post(server, "/v1/completions", {"model": model, "prompt": "a", "echo": True}))


def test_413_body_too_large(server, model):
    big = {"model": model, "messages": [{"role": "user", "content": "x" * 70_000}]}
    err = _err(post(server, "/v1/chat/completions", big), 413)
    assert err["code"] == "request_too_large"


def test_max_tokens_capped(client, model):
    r = client.completions.create(model=model, prompt="x", max_tokens=1000, temperature=0)
    assert r.usage.completion_tokens == 256 and r.choices[0].finish_reason == "length"


@pytest.mark.parametrize("path, field", [("/v1/completions", "max_tokens"),
                                         ("/v1/chat/completions", "max_completion_tokens"),
                                         ("/v1/responses", "max_output_tokens")])
def test_max_tokens_above_the_context_is_a_400_naming_the_limit(server, model, tiny, path, field):
    body = {"model": model, field: 100_000}
    body.update({"/v1/completions": {"prompt": "x"}, "/v1/chat/completions": {"messages": MSG},
                 "/v1/responses": {"input": "x"}}[path])
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and err["code"] == "context_length_exceeded"
    assert str(tiny.max_context) in err["message"] and "100000" in err["message"]


def test_a_grammar_over_the_size_cap_is_a_400_naming_sizes(server, model, tiny, monkeypatch):
    """An explicit constraint whose EBNF is over ``max_grammar_bytes``: a 400 that names the size and the cap
    (on xgrammar alone: the default engine serves such a schema on llguidance)."""
    monkeypatch.setattr(tiny.grammars._backend("xgrammar"), "max_grammar_bytes", 200)
    schema = {"type": "object", "properties": {f"size_cap_{i}": {"type": "integer"} for i in range(12)}}
    for body in ({"guided_json": schema},
                 {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema,
                                                                             "strict": True}}}):
        err = _err(post(server, "/v1/chat/completions", {"model": model, "messages": MSG, "max_tokens": 4,
                                                         "grammar_engine": "xgrammar", **body}))
        assert "over the cap of 200 bytes" in err["message"] and err["code"] == "grammar_compile_error"


# -- degrade ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_degrade_non_strict_schema_keeps_the_structure(server, model, seed):
    """Regression: a non-strict schema with one unenforceable keyword fell back to free text (one
    reply was a bare URL). Now only that keyword is relaxed: the output is always JSON of the schema's
    shape, validated against the full schema, and the header and the ``typedlm`` field say so."""
    body = {"model": model, "messages": MSG, "max_tokens": 60, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": REFUSED}}}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200
    assert r.headers["warning"].startswith('199 typedlm "response_format partly enforced: relaxed not at '
                                           '/properties/a/not')
    out = r.json()
    content = out["choices"][0]["message"]["content"]
    value = json.loads(content)  # structure kept: JSON with an integer 'a', whatever the random model wanted
    assert isinstance(value, dict) and isinstance(value["a"], int)
    notice = out["typedlm"]
    assert notice["degraded"] == "relaxed" and notice["relaxed"][0]["keyword"] == "not"
    assert notice["schema_valid"] == [jsonschema.Draft202012Validator(REFUSED).is_valid(value)]
    body["stream"] = True
    with httpx.stream("POST", server[0] + "/v1/chat/completions", json=body, timeout=60) as s:
        assert s.status_code == 200 and s.headers["warning"].startswith("199 typedlm")
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert streamed == content
    assert chunks[-1]["typedlm"]["schema_valid"] == notice["schema_valid"]


def test_a_schema_with_more_refusals_than_the_old_loop_allowed_is_relaxed_in_one_pass(server, model):
    """70 refused keywords (one ``uniqueItems`` per property): the old loop relaxed one refusal per
    normalizer run and gave up after 64 (free text); the lenient compile drops them all in one relaxing
    pass, so the output keeps the schema's structure and each place is named."""
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                               **{f"k{i}": {"type": "array", "items": {"type": "integer"},
                                                            "uniqueItems": True, "contains": {"const": 1}}
                                                  for i in range(70)}},
              "required": ["n"], "additionalProperties": False}
    body = {"model": model, "messages": MSG, "max_tokens": 200, "seed": 3,
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema,
                                                                      "any_whitespace": False}}}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    assert r.headers["warning"].startswith('199 typedlm "response_format partly enforced: relaxed uniqueItems at '
                                           '/properties/k0/uniqueItems; uniqueItems at /properties/k1/uniqueItems')
    out = r.json()
    notice = out["typedlm"]
    assert notice["degraded"] == "relaxed"
    assert [d["pointer"] for d in notice["relaxed"]] == [f"/properties/k{i}/uniqueItems" for i in range(70)]
    choice = out["choices"][0]
    content = choice["message"]["content"]
    assert content.startswith('{"n":'), content  # the grammar held from the start
    if choice["finish_reason"] == "stop":
        value = json.loads(content)
        assert notice["schema_valid"] == [jsonschema.Draft202012Validator(schema).is_valid(value)]


def test_degrade_when_grammar_disabled(server, model, monkeypatch, tiny):
    before = metric(server, "typedlm_degraded_requests_total")
    monkeypatch.setattr(tiny.grammars, "enabled", False)  # TYPEDLM_GRAMMAR=0 at load (engine.grammar_options)
    for extra in ({"guided_regex": "[a-z]+"}, {"response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "schema": PERSON, "strict": True}}}, {"structured_outputs": {"choice": ["a", "b"]}}):
        r = post(server, "/v1/chat/completions", {"model": model, "messages": MSG, "max_tokens": 4, **extra})
        assert r.status_code == 200, r.text
        assert "TYPEDLM_GRAMMAR=0" in r.headers["warning"]
        assert r.json()["choices"][0]["finish_reason"] == "length"  # unconstrained
    assert metric(server, "typedlm_degraded_requests_total") == before + 3


# -- concurrency ------------------------------------------------------------------------------------
def test_16_concurrent_mixed_requests(server, client, model):
    schemas = [PERSON, FLAGS, COLOR, POINT]

    def one(i):
        if i % 5 == 4:  # free-text rows between the constrained ones
            r = client.chat.completions.create(model=model, messages=MSG, max_tokens=20, temperature=1.0, seed=i)
            return None, r
        schema = schemas[i % 4]
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"request {i}"}], max_tokens=200, temperature=1.0,
            seed=i, response_format={"type": "json_schema", "json_schema": {"name": f"s{i % 4}", "schema": schema,
                                                                            "strict": True, "any_whitespace": False}})
        return schema, r

    sched = server[1].state.typedlm.scheduler
    sched.peak_batch = 0
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        out = list(pool.map(one, range(16)))
    assert sched.peak_batch == 4  # the server's max_batch: rows really shared the decode batch
    assert sum(s is None for s, _ in out) == 3
    for schema, r in out:
        ch = r.choices[0]
        if schema is None:
            assert ch.finish_reason == "length" and r.usage.completion_tokens == 20
        else:
            assert ch.finish_reason == "stop", ch.message.content
            jsonschema.validate(json.loads(ch.message.content), schema)
    assert metric(server, "typedlm_batch_size") == 0


def test_cancelled_stream_frees_its_slot(server, model):
    app = server[1]
    sched = app.state.typedlm.scheduler
    aborted = metric(server, "typedlm_generations_total", '{constraint="json_object",finish_reason="abort"}')
    body = {"model": model, "messages": MSG, "max_tokens": 256, "stream": True, "temperature": 1.0,
            "response_format": {"type": "json_object"}}
    with httpx.stream("POST", server[0] + "/v1/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
        assert sched.batch_size == 1
    deadline = time.monotonic() + 20
    while sched.batch_size and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sched.batch_size == 0 and sched.kv.size == 0
    time.sleep(0.2)
    assert metric(server, "typedlm_generations_total", '{constraint="json_object",finish_reason="abort"}') == aborted + 1


def test_metrics_move(server, client, model):
    path = '{path="/v1/chat/completions",status="200"}'
    ok0, bad0 = metric(server, "typedlm_requests_total", path), metric(
        server, "typedlm_requests_total", '{path="/v1/chat/completions",status="400"}')
    out0 = metric(server, "typedlm_completion_tokens_total")
    lat0, ttft0 = metric(server, "typedlm_request_latency_seconds_count"), metric(
        server, "typedlm_time_to_first_token_seconds_count")
    hits0, miss0 = metric(server, "typedlm_grammar_cache_hits_total"), metric(server, "typedlm_grammar_cache_misses_total")
    schema = {"type": "object", "properties": {"k": {"type": "boolean"}}, "required": ["k"], "additionalProperties": False}
    for _ in range(2):
        client.chat.completions.create(model=model, messages=MSG, max_tokens=30, extra_body={"guided_json": schema})
    post(server, "/v1/chat/completions", {"model": model, "messages": MSG, "temperature": 5})
    assert metric(server, "typedlm_requests_total", path) == ok0 + 2
    assert metric(server, "typedlm_requests_total", '{path="/v1/chat/completions",status="400"}') == bad0 + 1
    assert metric(server, "typedlm_completion_tokens_total") > out0
    assert metric(server, "typedlm_prompt_tokens_total") > 0
    assert metric(server, "typedlm_request_latency_seconds_count") == lat0 + 2
    assert metric(server, "typedlm_time_to_first_token_seconds_count") == ttft0 + 2
    assert metric(server, "typedlm_grammar_cache_misses_total") == miss0 + 1
    assert metric(server, "typedlm_grammar_cache_hits_total") == hits0 + 1
    text = httpx.get(server[0] + "/metrics").text
    assert "typedlm_queue_depth 0.0" in text


# -- separate servers: auth, admission, loading -----------------------------------------------------
def test_401_api_key(tiny):
    with live_server(create_app(tiny, ServerConfig(api_key="s3cret", warmup=False)), api_key="s3cret") as url:
        assert httpx.get(url + "/health").status_code == 200
        for path in ("/ready", "/metrics", "/v1/models"):
            assert _err(httpx.get(url + path), 401)["code"] == "invalid_api_key"
        assert httpx.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
        ok = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        assert ok.chat.completions.create(model=tiny.name, messages=MSG, max_tokens=2).usage.completion_tokens == 2


def test_429_when_admission_queue_full(tiny):
    import threading

    app = create_app(tiny, ServerConfig(max_batch=1, max_queue=1, warmup=False, retry_after_s=3))
    with live_server(app) as url:
        sched = app.state.typedlm.scheduler
        gate = threading.Event()
        sched.call(gate.wait, 60)  # hold the engine thread: the next request waits in the queue
        body = {"model": tiny.name, "messages": MSG, "max_tokens": 3}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(post, (url,), "/v1/chat/completions", body)
            deadline = time.monotonic() + 10
            while sched.queue_depth < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            r = post((url,), "/v1/chat/completions", body)
            err = _err(r, 429)
            assert r.headers["retry-after"] == "3" and err["type"] == "rate_limit_error"
            with pytest.raises(openai.RateLimitError):
                openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0).chat.completions.create(**body)
            gate.set()
            assert first.result(60).status_code == 200
        assert post((url,), "/v1/chat/completions", body).status_code == 200


def test_ready_503_until_loaded(tiny):
    import threading

    release = threading.Event()

    def loader():
        release.wait(60)
        return tiny

    with live_server(create_app(loader), wait_ready=False) as url:
        r = httpx.get(url + "/ready")
        assert r.status_code == 503 and r.json()["status"] == "loading" and r.headers["retry-after"]
        _err(post((url,), "/v1/chat/completions", {"model": tiny.name, "messages": MSG}), 503)
        assert httpx.get(url + "/health").status_code == 200
        assert "typedlm_ready 0.0" in httpx.get(url + "/metrics").text
        release.set()
        deadline = time.monotonic() + 60
        while httpx.get(url + "/ready").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(url + "/ready").json()["model"] == tiny.name
        assert "typedlm_ready 1.0" in httpx.get(url + "/metrics").text


def test_load_failure_is_reported(tiny):
    def loader():
        raise RuntimeError("weights missing")

    with live_server(create_app(loader), wait_ready=False) as url:
        deadline = time.monotonic() + 10
        while httpx.get(url + "/ready").json().get("status") == "loading" and time.monotonic() < deadline:
            time.sleep(0.05)
        r = httpx.get(url + "/ready")
        assert r.status_code == 503 and "weights missing" in r.json()["error"]


def test_stop_strings_stream_and_not(client, model):
    base = client.completions.create(model=model, prompt="Once", max_tokens=20, temperature=0).choices[0].text
    stop = base[8:11]
    assert stop.strip() and base.find(stop) >= 0
    r = client.completions.create(model=model, prompt="Once", max_tokens=20, temperature=0, stop=[stop])
    assert r.choices[0].text == base[: base.find(stop)] and r.choices[0].finish_reason == "stop"
    parts = list(client.completions.create(model=model, prompt="Once", max_tokens=20, temperature=0, stop=[stop],
                                           stream=True))
    assert "".join(p.choices[0].text for p in parts) == r.choices[0].text


def test_stream_n_choices(client, model):
    chunks = list(client.chat.completions.create(model=model, messages=MSG, max_tokens=5, n=2, seed=11, stream=True,
                                                 stream_options={"include_usage": True}))
    texts = {0: "", 1: ""}
    finished = set()
    for ch in chunks[:-1]:
        c = ch.choices[0]
        texts[c.index] += c.delta.content or ""
        if c.finish_reason:
            finished.add(c.index)
    assert finished == {0, 1} and chunks[-1].usage.completion_tokens == 10
    full = client.chat.completions.create(model=model, messages=MSG, max_tokens=5, n=2, seed=11)
    assert [c.message.content for c in full.choices] == [texts[0], texts[1]]


def test_disconnected_non_stream_request_is_cancelled(server, model):
    import threading

    sched = server[1].state.typedlm.scheduler
    aborted = metric(server, "typedlm_generations_total", '{constraint="none",finish_reason="abort"}')
    gate = threading.Event()
    sched.call(gate.wait, 60)  # hold the engine so the request is still pending when the client leaves
    try:
        with pytest.raises(httpx.ReadTimeout):
            post(server, "/v1/completions", {"model": model, "prompt": "x", "max_tokens": 256, "temperature": 1.0},
                 timeout=httpx.Timeout(60, read=0.5))
        time.sleep(1.2)  # > the 0.5 s disconnect poll
    finally:
        gate.set()
    deadline = time.monotonic() + 20
    while (sched.batch_size or sched.queue_depth) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sched.batch_size == 0 and sched.queue_depth == 0
    time.sleep(0.2)
    assert metric(server, "typedlm_generations_total", '{constraint="none",finish_reason="abort"}') == aborted + 1
