"""/v1/responses, live on loopback, driven by the official ``openai`` client (and httpx for the wire)."""

import json

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field


COLOR = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"],
         "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                          "required": ["city"], "additionalProperties": False}, "strict": True}


class Point(BaseModel):
    x: int = Field(ge=-9, le=9)
    y: int = Field(ge=-9, le=9)


def post(tiny_url, body):
    return httpx.post(tiny_url + "/v1/responses", json=body, timeout=120)


def test_create_text(tiny_client, model):
    r = tiny_client.responses.create(model=model, input="Say hi.", instructions="Be brief.", max_output_tokens=6,
                                temperature=0)
    assert r.object == "response" and r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 6 and r.usage.input_tokens > 0
    assert r.output[0].type == "message" and r.output_text
    again = tiny_client.responses.create(model=model, input=[{"role": "user", "content": "Say hi."}],
                                    instructions="Be brief.", max_output_tokens=6, temperature=0)
    assert again.output_text == r.output_text  # the string and the message-list input render the same prompt


def test_json_schema_strict(tiny_client, model):
    r = tiny_client.responses.create(model=model, input="A colour.", temperature=0, max_output_tokens=64,
                                text={"format": {"type": "json_schema", "name": "c", "schema": COLOR, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), COLOR)


def test_parse_returns_the_model(tiny_client, model):
    r = tiny_client.responses.parse(model=model, input="A point.", text_format=Point, max_output_tokens=64, temperature=0)
    assert isinstance(r.output_parsed, Point)


def test_stream_events_and_helper(tiny_client, model):
    events = list(tiny_client.responses.create(model=model, input="A colour.", stream=True, max_output_tokens=64,
                                          text={"format": {"type": "json_schema", "name": "c", "schema": COLOR,
                                                           "strict": True}}))
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed" and "response.output_text.done" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    jsonschema.validate(json.loads(text), COLOR)
    final = events[-1].response
    assert final.output_text == text and final.output[0].id == events[2].item.id
    with tiny_client.responses.stream(model=model, input="A point.", text_format=Point, max_output_tokens=64) as s:
        got = s.get_final_response()
    assert isinstance(got.output_parsed, Point)


def test_function_tool_loop(tiny_client, model):
    tools = [WEATHER]
    r = tiny_client.responses.create(model=model, input="Weather in Paris?", tools=tools, tool_choice="required",
                                max_output_tokens=64, temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
    # fed back as the SDK's own items: the call, then its output
    history = [{"role": "user", "content": "Weather in Paris?"}, *[o.model_dump() for o in r.output],
               {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}]
    again = tiny_client.responses.create(model=model, input=history, tools=tools, max_output_tokens=8, temperature=0)
    assert again.status in ("completed", "incomplete")


def test_stream_function_call(tiny_client, model):
    events = list(tiny_client.responses.create(model=model, input="Weather?", tools=[WEATHER], stream=True,
                                          tool_choice={"type": "function", "name": "get_weather"},
                                          max_output_tokens=64))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and done[0].arguments == args
    jsonschema.validate(json.loads(args), WEATHER["parameters"])
    item = events[-1].response.output[-1]
    assert item.type == "function_call" and item.arguments == args and item.status == "completed"


@pytest.mark.parametrize("extra, param", [
    ({"previous_response_id": "resp_x"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0].type"),
    ({"text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "nonsense"}}}}, None),
])
def test_clear_400s(tiny_url, model, extra, param):
    r = post(tiny_url, {"model": model, "input": "hi", **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"]
    if param is not None:
        assert param in (err["param"] or "") or param in err["message"]
