"""The official openai client against a live server on the default model (SmolLM2-135M): a few
requests only (CPU is slow). The tiny-model tests cover the mechanics; these check a real model."""

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel, EmailStr, Field, HttpUrl

from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server

pytestmark = pytest.mark.real_model

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}


class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)


@pytest.fixture(scope="module")
def client(real):
    with live_server(create_app(real, ServerConfig(max_tokens_cap=80))) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)


def test_tool_choice_required_on_the_default_model(client, real):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    r = client.chat.completions.create(
        model=real.name, messages=[{"role": "user", "content": "What is the weather in Paris, in celsius?"}],
        tools=tools, tool_choice="required", parallel_tool_calls=False, max_tokens=60, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    args = json.loads(ch.message.tool_calls[0].function.arguments)
    jsonschema.validate(args, WEATHER)


def test_parse_with_a_pydantic_response_format(client, real):
    r = client.chat.completions.parse(
        model=real.name, messages=[{"role": "user", "content": "Alice is 31 years old. Give her as JSON."}],
        response_format=Person, max_tokens=60, temperature=0, extra_body={"jump_forward": True})
    assert isinstance(r.choices[0].message.parsed, Person)
    assert r.usage.model_extra["forced_tokens"] > 0


class Contact(BaseModel):  # strict-mode types of issue 36: format email, the bounded URL, a unique array
    email: EmailStr
    website: HttpUrl
    tags: set[str] = Field(max_length=3)


def test_parse_strict_pydantic_types_on_the_default_model(client, real):
    """``.parse()`` in strict mode with ``EmailStr``, ``HttpUrl`` and ``set[str]``: 200, and the answer
    parses (EmailStr runs email-validator on the address the grammar let the model write)."""
    r = client.chat.completions.parse(
        model=real.name, response_format=Contact, max_tokens=80, temperature=0,
        messages=[{"role": "user", "content": "John's e-mail is john@example.com, his website is "
                                              "https://example.com, tags: friend, work. Give his contact as JSON."}])
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Contact)
    assert "@" in parsed.email and parsed.website.scheme in ("http", "https")


ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius? And what is 2 plus 3?"}]


def _valid_calls(calls):
    assert calls
    for c in calls:
        assert c.id.startswith("call_") and c.type == "function"
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def test_named_none_and_auto_on_the_default_model(client, real):
    kw = dict(model=real.name, messages=ASK, tools=TOOLS, max_tokens=40, temperature=0, parallel_tool_calls=False)
    named = client.chat.completions.create(**kw, tool_choice={"type": "function", "function": {"name": "add"}})
    assert named.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in named.choices[0].message.tool_calls] == ["add"]
    _valid_calls(named.choices[0].message.tool_calls)
    none = client.chat.completions.create(**kw, tool_choice="none")
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    assert "<tool_call>" not in none.choices[0].message.content
    auto = client.chat.completions.create(**kw, tool_choice="auto").choices[0]
    if auto.message.tool_calls:  # the model chose to call: the call is constrained
        assert auto.finish_reason == "tool_calls"
        _valid_calls(auto.message.tool_calls)
    else:
        assert auto.message.content and auto.finish_reason in ("stop", "length")


def test_parallel_calls_and_a_stream_assembled_by_the_client_on_the_default_model(client, real):
    kw = dict(model=real.name, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=80, temperature=0)
    par = client.chat.completions.create(**kw, parallel_tool_calls=True).choices[0]
    _valid_calls(par.message.tool_calls)
    assert len({c.id for c in par.message.tool_calls}) == len(par.message.tool_calls)
    one = dict(kw, parallel_tool_calls=False, max_tokens=40)
    plain = client.chat.completions.create(**one).choices[0]
    with client.chat.completions.stream(**one) as stream:
        snap = stream.get_final_completion().choices[0]
    assert snap.finish_reason == plain.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in snap.message.tool_calls] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in plain.message.tool_calls]


def test_multi_turn_with_a_tool_result_on_the_default_model(client, real):
    history = ASK[:1] + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    r = client.chat.completions.create(model=real.name, messages=history, tools=TOOLS, tool_choice="none",
                                       max_tokens=30, temperature=0).choices[0]
    assert r.message.tool_calls is None and r.message.content and r.finish_reason in ("stop", "length")
