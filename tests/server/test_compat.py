"""What clients send and expect beyond the happy path: assistant messages sent back whole
(``model_dump()``), tool calls cut by ``max_tokens``, SGLang's top-level structured-output fields,
``/v1/models/{id}``, schemas invalid against their metaschema. Live server, official ``openai`` client."""

import json
import re

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
    "additionalProperties": False}}}
MSG = [{"role": "user", "content": "Weather in Paris?"}]


def chat(tiny_url, body):
    return httpx.post(tiny_url + "/v1/chat/completions", json=body, timeout=120)


def test_tool_loop_appending_model_dump(tiny_client, model):
    messages = list(MSG)
    r = tiny_client.chat.completions.create(model=model, messages=messages, tools=[WEATHER], tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=64, temperature=0)
    msg = r.choices[0].message
    assert msg.tool_calls and r.choices[0].finish_reason == "tool_calls"
    dumped = msg.model_dump()
    assert {"annotations", "audio", "function_call", "refusal"} <= set(dumped)  # what the SDK sends back
    messages.append(dumped)
    for call in msg.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    again = tiny_client.chat.completions.create(model=model, messages=messages, tools=[WEATHER], max_tokens=8,
                                           temperature=0)
    assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_parse_message_sent_back(tiny_client, model):
    """``.parse()`` messages carry ``parsed`` and ``parsed_arguments``: derived, accepted."""
    r = tiny_client.chat.completions.parse(model=model, messages=MSG, tools=[openai.pydantic_function_tool(City)],
                                      tool_choice="required", parallel_tool_calls=False, max_tokens=64,
                                      temperature=0)
    msg = r.choices[0].message
    again = tiny_client.chat.completions.create(model=model, max_tokens=4, messages=[
        *MSG, msg.model_dump(), *[{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in msg.tool_calls]])
    assert again.choices


class City(BaseModel):
    city: str = Field(max_length=12)


@pytest.mark.parametrize("field, value, what", [
    ("audio", {"id": "audio_1"}, "audio"),
    ("function_call", {"name": "f", "arguments": "{}"}, "tool_calls"),
])
def test_meaningful_sent_back_fields_are_400(tiny_url, model, field, value, what):
    r = chat(tiny_url, {"model": model, "messages": [*MSG, {"role": "assistant", "content": "x", field: value}],
                      "max_tokens": 2})
    assert r.status_code == 400 and what in r.json()["error"]["message"], r.text


def test_refusal_is_the_turn_text(tiny_url, model):
    ok = chat(tiny_url, {"model": model, "max_tokens": 2, "messages": [
        *MSG, {"role": "assistant", "content": None, "refusal": "I can't.", "annotations": []},
        {"role": "user", "content": "ok"}]})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("max_tokens", range(1, 13))
def test_cut_tool_call_leaks_no_markup(tiny_url, model, max_tokens):
    body = {"model": model, "messages": MSG, "tools": [WEATHER], "tool_choice": "required", "max_tokens": max_tokens,
            "temperature": 0}
    r = chat(tiny_url, body).json()["choices"][0]
    assert r["finish_reason"] == "length"
    assert "<tool" not in (r["message"]["content"] or "") and "tool_calls" not in r["message"]
    with httpx.stream("POST", tiny_url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert "<tool" not in content and not re.search(r"<t?o?o?l?_?$", content)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_sglang_top_level_fields(tiny_url, model):
    r = chat(tiny_url, {"model": model, "messages": MSG, "regex": "[0-9]{3}", "max_tokens": 8})
    assert r.status_code == 200 and re.fullmatch("[0-9]{3}", r.json()["choices"][0]["message"]["content"])
    assert r.headers["X-TypedLM-Constraint"] == "regex"
    r = chat(tiny_url, {"model": model, "messages": MSG, "ebnf": 'root ::= "yes" | "no"', "max_tokens": 8})
    assert r.json()["choices"][0]["message"]["content"] in ("yes", "no") and r.headers["X-TypedLM-Constraint"] == "ebnf"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
    r = chat(tiny_url, {"model": model, "messages": MSG, "json_schema": json.dumps(schema), "max_tokens": 40})
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), schema)
    # precedence as with guided_*: guided_regex over regex, guided_grammar over ebnf
    r = chat(tiny_url, {"model": model, "messages": MSG, "regex": "[0-9]{3}", "guided_regex": "[a-c]{2}", "max_tokens": 8})
    assert re.fullmatch("[a-c]{2}", r.json()["choices"][0]["message"]["content"])
    assert r.headers["X-TypedLM-Constraint"] == "guided_regex"
    r = chat(tiny_url, {"model": model, "messages": MSG, "regex": "(", "max_tokens": 8})
    assert r.status_code == 400 and r.json()["error"]["param"] == "regex"
    r = httpx.post(tiny_url + "/v1/completions", json={"model": model, "prompt": "x", "regex": "[0-9]{2}", "max_tokens": 8})
    assert re.fullmatch("[0-9]{2}", r.json()["choices"][0]["text"])


def test_models_retrieve(tiny_client, tiny_url, model):
    assert tiny_client.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError):
        tiny_client.models.retrieve("no-such-model")
    assert httpx.get(tiny_url + "/v1/models/no-such-model").json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "nonsense"}}}},
     "response_format.json_schema.schema/type"),
    ({"guided_json": {"properties": {"a": {"minimum": "3"}}}}, "guided_json/properties/a/minimum"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": "a"}}}]},
     "tools[0].function.parameters/required"),
])
def test_invalid_schema_is_400(tiny_url, model, body, param):
    r = chat(tiny_url, {"model": model, "messages": MSG, "max_tokens": 4, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_json_schema" and err["param"] == param and "not a valid JSON Schema" in err["message"]
