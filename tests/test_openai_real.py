"""The official openai client against a live server on the default model (SmolLM2-135M): a few
requests only (CPU is slow). The tiny-model tests cover the mechanics; these check a real model."""

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

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
