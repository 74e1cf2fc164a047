"""Tool calling with the official openai client against a live server on tiny random-weight models.

A random-weight model samples anything its grammar allows, so every call it makes must still be a
call of a listed tool with arguments valid for that tool's schema."""

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server
from typedlm.server.chat.tools import ToolStream, parse_calls, template_messages

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                        "b": {"type": "integer", "minimum": 0, "maximum": 99}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
MSG = [{"role": "user", "content": "What is the weather in Paris?"}]


class GetWeather(BaseModel):
    city: str = Field(max_length=12)
    unit: str = Field(pattern="^(c|f)$")


def _client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=180)


@pytest.fixture(scope="module")
def client(tiny):
    with live_server(create_app(tiny, ServerConfig(max_batch=4, max_tokens_cap=200))) as url:
        yield _client(url)


@pytest.fixture(scope="module")
def rclient():
    """A Qwen3-style tiny model: tools rendered by its own template, <tool_call> one token."""
    from typedlm.testing import tiny_reasoning_engine

    eng = tiny_reasoning_engine()
    with live_server(create_app(eng, ServerConfig(max_batch=4, max_tokens_cap=200))) as url:
        yield _client(url), eng


def _check_calls(calls):
    assert calls
    for c in calls:
        assert c.id.startswith("call_") and c.type == "function"
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_required_one_call_valid_for_its_schema(client, tiny, seed):
    r = client.chat.completions.create(model=tiny.name, messages=MSG, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=120, seed=seed)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert len(ch.message.tool_calls) == 1
    _check_calls(ch.message.tool_calls)
    assert ch.message.content is None


def test_named_tool_choice_calls_that_tool(client, tiny):
    r = client.chat.completions.create(model=tiny.name, messages=MSG, tools=TOOLS, max_tokens=120, seed=5,
                                       tool_choice={"type": "function", "function": {"name": "add"}})
    calls = r.choices[0].message.tool_calls
    assert {c.function.name for c in calls} == {"add"}
    _check_calls(calls)


def test_parallel_calls_each_valid(client, tiny):
    seen = []
    for seed in range(4):
        r = client.chat.completions.create(model=tiny.name, messages=MSG, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=True, max_tokens=200, seed=seed, temperature=1.0)
        calls = r.choices[0].message.tool_calls
        if r.choices[0].finish_reason == "tool_calls":
            _check_calls(calls)
            assert len({c.id for c in calls}) == len(calls)
        seen.append(len(calls or []))
    assert max(seen) >= 1


def test_none_never_calls(client, tiny):
    r = client.chat.completions.create(model=tiny.name, messages=MSG, tools=TOOLS, tool_choice="none",
                                       max_tokens=20, seed=0)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")


def test_auto_free_text_or_a_constrained_call(rclient):
    client, eng = rclient
    trigger = eng.tokenizer.convert_tokens_to_ids("<tool_call>")
    base = dict(model=eng.name, messages=MSG, tools=TOOLS, max_tokens=120, seed=0, parallel_tool_calls=False,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    text = client.chat.completions.create(**base, tool_choice="auto", logit_bias={str(trigger): -100})
    assert text.choices[0].message.tool_calls is None and text.choices[0].message.content
    call = client.chat.completions.create(**base, tool_choice="auto", logit_bias={str(trigger): 100})
    assert call.choices[0].finish_reason == "tool_calls"
    _check_calls(call.choices[0].message.tool_calls)


@pytest.mark.parametrize("parallel", [False, True])
def test_stream_tool_calls_assembled_by_the_client(client, tiny, parallel):
    kw = dict(model=tiny.name, messages=MSG, tools=TOOLS, tool_choice="required", parallel_tool_calls=parallel,
              max_tokens=200, seed=1)
    plain = client.chat.completions.create(**kw)
    with client.chat.completions.stream(**kw) as stream:
        deltas = [e for e in stream if e.type == "tool_calls.function.arguments.delta"]
        snap = stream.current_completion_snapshot  # get_final_completion() raises on finish "length"
    got, want = snap.choices[0].message.tool_calls, plain.choices[0].message.tool_calls
    assert [c.function.name for c in got] == [c.function.name for c in want]
    assert [c.function.arguments for c in got] == [c.function.arguments for c in want]  # the same text
    assert snap.choices[0].finish_reason == plain.choices[0].finish_reason
    assert len(deltas) >= len(got)  # arguments arrived in fragments
    if not parallel:
        assert snap.choices[0].finish_reason == "tool_calls" and len(got) == 1
    _check_calls(got)


def test_parse_with_pydantic_tool(client, tiny):
    r = client.chat.completions.parse(model=tiny.name, messages=MSG, tools=[openai.pydantic_function_tool(GetWeather)],
                                      tool_choice="required", parallel_tool_calls=False, max_tokens=120, seed=2)
    parsed = r.choices[0].message.tool_calls[0].function.parsed_arguments
    assert isinstance(parsed, GetWeather)


def test_multi_turn_with_tool_results(client, tiny, rclient):
    history = MSG + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                             "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees"},
    ]
    for c, model in ((client, tiny.name), (rclient[0], rclient[1].name)):
        r = c.chat.completions.create(model=model, messages=history, tools=TOOLS, max_tokens=10, seed=0,
                                      tool_choice="none")
        assert r.choices[0].finish_reason in ("stop", "length")


def test_history_rendering_native_and_fallback(tiny, rclient):
    from typedlm.server.chat.protocol import ChatRequest

    body = ChatRequest(model="m", tools=TOOLS, messages=MSG + [
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                              "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3"}])
    eng = rclient[1]
    msgs, kw = template_messages(body, eng.chat.template)
    native = eng.render_chat(msgs, **kw)
    assert "<tools>" in native and '"name": "add", "arguments": {"a": 1, "b": 2}' in native
    assert "<tool_response>\n3\n</tool_response>" in native
    msgs, kw = template_messages(body, tiny.chat.template)
    assert kw == {}
    fallback = tiny.render_chat(msgs)
    assert "You can call these tools" in fallback and '"name":"get_weather"' in fallback
    assert '<tool_call>\n{"name": "add", "arguments": {"a":1,"b":2}}\n</tool_call>' in fallback
    assert "<tool_response>\n3\n</tool_response>" in fallback


# uniqueItems beside contains is not enforced
UNIQUE = {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                                          "maximum": 3}, "maxItems": 3,
                                              "uniqueItems": True, "contains": {"const": 0}}},
          "required": ["x"], "additionalProperties": False}


def test_tool_schema_goes_through_the_refusal_layer(client, tiny):
    bad = [{"type": "function", "function": {"name": "f", "parameters": UNIQUE, "strict": True}}]
    with pytest.raises(openai.BadRequestError, match=r"tools\[0\]\.function\.parameters.*uniqueItems"):
        client.chat.completions.create(model=tiny.name, messages=MSG, tools=bad, tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="not in 'tools'"):
        client.chat.completions.create(model=tiny.name, messages=MSG, tools=TOOLS,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})


@pytest.mark.parametrize("stream", [False, True])
def test_non_strict_tool_schema_is_relaxed_and_the_arguments_validated(client, tiny, stream):
    """A non-strict tool whose schema has a keyword the grammar cannot enforce (``uniqueItems``) is not a
    400: the call is generated under the schema without it (still an array of small integers), and
    ``Warning: 199`` + the ``typedlm`` field say so, with each choice's arguments checked on the
    original schema by jsonschema (compared here with jsonschema's own verdict)."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": UNIQUE}}, TOOLS[1]]
    kw = dict(model=tiny.name, messages=MSG, tools=tools, tool_choice={"type": "function", "function": {"name": "f"}},
              n=3, seed=5, temperature=1.0, max_tokens=120, parallel_tool_calls=False)
    raw = client.chat.completions.with_raw_response.create(**kw, stream=stream)
    assert raw.headers["warning"].startswith('199 typedlm "tool parameters partly enforced: relaxed uniqueItems at '
                                             '/properties/x/uniqueItems of tool f')
    if stream:
        chunks = list(raw.parse())
        notice = [c.model_extra["typedlm"] for c in chunks if (c.model_extra or {}).get("typedlm")]
        assert len(notice) == 1
        notice, args = notice[0], {}
        for c in chunks:
            for ch in c.choices:
                for tc in ch.delta.tool_calls or []:
                    args[ch.index] = args.get(ch.index, "") + (tc.function.arguments or "")
        args = [args[i] for i in range(3)]
    else:
        resp = raw.parse()
        notice = resp.model_extra["typedlm"]
        assert all(ch.finish_reason == "tool_calls" and len(ch.message.tool_calls) == 1 for ch in resp.choices)
        assert all(ch.message.tool_calls[0].function.name == "f" for ch in resp.choices)
        args = [ch.message.tool_calls[0].function.arguments for ch in resp.choices]
    assert notice["degraded"] == "relaxed" and "uniqueItems" in notice["reason"]
    assert notice["relaxed"] == [{"tool": "f", "keyword": "uniqueItems", "pointer": "/properties/x/uniqueItems",
                                  "action": "dropped 'uniqueItems'"}]
    relaxed = {**UNIQUE, "properties": {"x": {k: v for k, v in UNIQUE["properties"]["x"].items()
                                               if k != "uniqueItems"}}}
    verdicts = []
    for a, valid, errors in zip(args, notice["schema_valid"], notice["schema_errors"]):
        value = json.loads(a)
        jsonschema.validate(value, relaxed)  # the superset grammar held
        ok = jsonschema.Draft202012Validator(UNIQUE).is_valid(value)
        assert valid is ok and bool(errors) is not ok
        verdicts.append(ok)
    assert len(verdicts) == 3


def test_a_relaxed_tool_leaves_a_response_format_beside_it_exact(client, tiny):
    """tool_choice auto with a relaxed (non-strict) tool and a json_schema answer: the tag is compiled
    lenient for the tool only; an answer schema that does not compile exactly is still a 400 (it is not
    relaxed along with the tool), one that does compiles beside the relaxed tool."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": UNIQUE}}]
    refused = {"type": "object", "properties": {"v": {"type": "array", "uniqueItems": True, "contains": {}}}}
    kw = dict(model=tiny.name, messages=MSG, tools=tools, tool_choice="auto", max_tokens=8, seed=0)
    with pytest.raises(openai.BadRequestError, match="answer's json_schema.*uniqueItems"):
        client.chat.completions.create(**kw, response_format={"type": "json_schema", "json_schema": {
            "name": "a", "schema": refused}})
    raw = client.chat.completions.with_raw_response.create(**kw, response_format={
        "type": "json_schema", "json_schema": {"name": "a", "schema": ADD}})
    assert raw.headers["warning"].startswith('199 typedlm "tool parameters partly enforced: relaxed uniqueItems')


def test_parse_and_stream_parsers_agree():
    """Both give the arguments as the model wrote them (spacing kept), not re-serialized."""
    text = 'hello <tool_call>\n{"name": "add", "arguments": {"a" :1,"b": {"c": [2 ]}}}\n</tool_call>\n' \
           '<tool_call>\n{"name": "f", "arguments":  {}}\n</tool_call>'
    content, calls = parse_calls(text)
    assert content == "hello" and [c.name for c in calls] == ["add", "f"]
    assert [c.arguments for c in calls] == ['{"a" :1,"b": {"c": [2 ]}}', "{}"]
    for size in (1, 3, 7, len(text)):
        ts, out = ToolStream(), []
        for i in range(0, len(text), size):
            out += ts.feed(text[i:i + size])
        args = {}
        for d in out:
            for tc in d.get("tool_calls", []):
                args[tc["index"]] = args.get(tc["index"], "") + tc["function"].get("arguments", "")
        assert [args[i] for i in sorted(args)] == [c.arguments for c in calls], size
        assert "".join(d.get("content", "") for d in out).strip() == "hello"


def test_auto_with_response_format_answers_json_or_calls(rclient):
    client, eng = rclient
    trigger = str(eng.tokenizer.convert_tokens_to_ids("<tool_call>"))
    rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": ADD, "strict": True}}
    base = dict(model=eng.name, messages=MSG, tools=TOOLS, tool_choice="auto", response_format=rf, max_tokens=120,
                seed=0, parallel_tool_calls=False, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    answer = client.chat.completions.create(**base, logit_bias={trigger: -100})
    assert answer.choices[0].message.tool_calls is None
    jsonschema.validate(json.loads(answer.choices[0].message.content), ADD)
    call = client.chat.completions.create(**base, logit_bias={trigger: 100})
    assert call.choices[0].finish_reason == "tool_calls"
    _check_calls(call.choices[0].message.tool_calls)
    forced = client.chat.completions.create(**{**base, "tool_choice": "required"})  # the format waits a turn
    assert forced.choices[0].finish_reason == "tool_calls"
    _check_calls(forced.choices[0].message.tool_calls)
