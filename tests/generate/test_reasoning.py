"""Reasoning models (mechanics on a tiny random model with a Qwen3-style template and <think> tokens):
reasoning_content, constraints that start after the block, the budget, chat_template_kwargs."""

import json

import jsonschema
import openai
import pytest

from typedlm.generate.reasoning import prepare
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server
from typedlm.testing import tiny_reasoning_engine

POINT = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9},
                                          "y": {"enum": ["a", "b"]}},
         "required": ["x", "y"], "additionalProperties": False}
RF = {"type": "json_schema", "json_schema": {"name": "p", "schema": POINT, "strict": True}}
MSG = [{"role": "user", "content": "Think, then answer."}]


@pytest.fixture(scope="module")
def reng():
    return tiny_reasoning_engine()


@pytest.fixture(scope="module")
def client(reng):
    with live_server(create_app(reng, ServerConfig(max_batch=4, max_tokens_cap=300))) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=180)


def _end(reng):
    return str(reng.reasoning.end_ids[0])


def test_prompt_modes(reng):
    fmt = reng.reasoning
    open_text = reng.render_chat(MSG)
    assert prepare(fmt, open_text, None) == (open_text + "<think>\n", True)
    closed = reng.render_chat(MSG, enable_thinking=False)
    assert prepare(fmt, closed, None) == (closed, False)
    text, thinking = prepare(fmt, open_text, 0)
    assert not thinking and text.endswith("<think>\n\n</think>\n\n")


def test_budget_forces_the_end_then_the_grammar_applies(client, reng):
    r = client.chat.completions.create(model=reng.name, messages=MSG, response_format=RF, max_tokens=200, seed=0,
                                       logit_bias={_end(reng): -100},  # the model never ends on its own
                                       extra_body={"max_reasoning_tokens": 12})
    msg = r.choices[0].message
    thought = msg.model_extra["reasoning_content"]
    assert thought and "<think>" not in thought and "</think>" not in thought
    jsonschema.validate(json.loads(msg.content), POINT)
    assert r.usage.completion_tokens_details.reasoning_tokens == 13  # 12 + the forced marker
    assert r.usage.model_extra["forced_tokens"] == 1
    assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("effort, budget", [("none", 0), ("minimal", 64)])
def test_reasoning_effort_maps_to_a_budget(client, reng, effort, budget):
    r = client.chat.completions.create(model=reng.name, messages=MSG, response_format=RF, max_tokens=200, seed=1,
                                       logit_bias={_end(reng): -100}, reasoning_effort=effort)
    details = r.usage.completion_tokens_details
    if budget:
        assert details.reasoning_tokens == budget + 1
    else:  # the block is closed in the prompt: no reasoning at all
        assert details is None and r.choices[0].message.model_extra.get("reasoning_content") is None
    jsonschema.validate(json.loads(r.choices[0].message.content), POINT)


def test_stream_deltas_match_the_message(client, reng):
    kw = dict(model=reng.name, messages=MSG, response_format=RF, max_tokens=200, seed=2,
              extra_body={"max_reasoning_tokens": 20})
    full = client.chat.completions.create(**kw)
    thought, content = "", ""
    for chunk in client.chat.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            thought += (ch.delta.model_extra or {}).get("reasoning_content") or ""
            content += ch.delta.content or ""
    assert thought == full.choices[0].message.model_extra["reasoning_content"]
    assert content == full.choices[0].message.content
    jsonschema.validate(json.loads(content), POINT)


def test_enable_thinking_false_means_no_reasoning(client, reng):
    r = client.chat.completions.create(model=reng.name, messages=MSG, response_format=RF, max_tokens=60, seed=0,
                                       extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].message.model_extra.get("reasoning_content") is None
    jsonschema.validate(json.loads(r.choices[0].message.content), POINT)


def test_reasoning_then_a_required_tool_call(client, reng):
    tools = [{"type": "function", "function": {"name": "point", "parameters": POINT}}]
    r = client.chat.completions.create(model=reng.name, messages=MSG, tools=tools, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=200, seed=3,
                                       extra_body={"max_reasoning_tokens": 10})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.model_extra["reasoning_content"]
    jsonschema.validate(json.loads(ch.message.tool_calls[0].function.arguments), POINT)


def test_include_reasoning_false_drops_it(client, reng):
    r = client.chat.completions.create(model=reng.name, messages=MSG, max_tokens=20, seed=0,
                                       extra_body={"max_reasoning_tokens": 5, "include_reasoning": False})
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})
    assert r.usage.completion_tokens_details.reasoning_tokens >= 1


def test_reasoning_fields_on_a_plain_model_are_400(tiny):
    with live_server(create_app(tiny, ServerConfig())) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="reasoning_effort: .*not a reasoning model"):
            c.chat.completions.create(model=tiny.name, messages=MSG, reasoning_effort="low", max_tokens=2)
        with pytest.raises(openai.BadRequestError, match="chat_template_kwargs may not set tools"):
            c.chat.completions.create(model=tiny.name, messages=MSG, max_tokens=2,
                                      extra_body={"chat_template_kwargs": {"tools": []}})


def test_responses_reasoning_items(client, reng):
    """/v1/responses: the thought is a ``reasoning`` item before the message, streamed as
    ``response.reasoning_text.delta``; sent back in ``input`` it is accepted."""
    text = {"format": {"type": "json_schema", "name": "p", "schema": POINT, "strict": True}}
    kw = dict(model=reng.name, input="Think, then answer.", text=text, max_output_tokens=200,
              reasoning={"effort": "minimal"})
    r = client.responses.create(**kw)
    kinds = [o.type for o in r.output]
    assert kinds == ["reasoning", "message"], kinds
    thought = r.output[0].content[0].text
    assert thought and "</think>" not in thought
    assert 0 < r.usage.output_tokens_details.reasoning_tokens <= 65
    jsonschema.validate(json.loads(r.output_text), POINT)
    events = list(client.responses.create(**kw, stream=True))
    streamed = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    final = events[-1].response
    assert final.output[0].type == "reasoning" and final.output[0].content[0].text == streamed
    again = client.responses.create(**{**kw, "input": [{"role": "user", "content": "Think."},
                                                       *[o.model_dump() for o in r.output],
                                                       {"role": "user", "content": "Again."}]})
    assert again.status == "completed"
