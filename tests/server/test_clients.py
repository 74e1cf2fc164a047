"""The client matrix: each popular library's default path against a live ``typedlm serve`` app on the
tiny random model (loopback only: litellm reads its local cost map, openai-agents traces nothing).

A random model writes whatever its grammar allows, so each schema here is bounded (short strings,
small integers, enums) and every answer that parses proves the grammar reached the client intact.
The README's client table lists the same paths.
"""

import asyncio
import json
import os
import uuid
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import AnyUrl, BaseModel, ConfigDict, EmailStr, Field, HttpUrl, IPvAnyAddress, NameEmail


os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # before litellm is imported: no fetch of the cost map
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
KEY = "unused"
MAX = 96


class Point(BaseModel):
    x: int = Field(ge=-9, le=9)
    y: int = Field(ge=-9, le=9)


class Weather(BaseModel):
    """Closed (``extra="forbid"``): an open object lets a random model write an extra key, whose name no
    bound limits, past any token budget."""
    model_config = ConfigDict(extra="forbid")

    city: str = Field(max_length=10)


def get_weather(city: Literal["Paris", "Oslo"]) -> str:
    """Weather in a city."""
    return "sunny"


WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                 "parameters": Weather.model_json_schema()}}


@pytest.fixture(scope="module")
def server(tiny_url):
    return tiny_url + "/v1"


@pytest.fixture(scope="module")
def client(tiny_client):
    return tiny_client


# -- openai ----------------------------------------------------------------------------------------
def test_openai_chat_parse_and_stream(client, model):
    r = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "A point."}],
                                      response_format=Point, max_tokens=MAX, temperature=0)
    assert isinstance(r.choices[0].message.parsed, Point)
    with client.chat.completions.stream(model=model, messages=[{"role": "user", "content": "A point."}],
                                        response_format=Point, max_tokens=MAX) as s:
        assert isinstance(s.get_final_completion().choices[0].message.parsed, Point)


def test_openai_tool_loop_with_model_dump(client, model):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    r = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=MAX, temperature=0)
    msg = r.choices[0].message
    messages += [msg.model_dump(), *[{"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in msg.tool_calls]]
    assert client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], max_tokens=8).choices


def test_openai_responses_create_parse_stream(client, model):
    assert client.responses.create(model=model, input="hi", max_output_tokens=4).output_text
    assert isinstance(client.responses.parse(model=model, input="A point.", text_format=Point,
                                             max_output_tokens=MAX).output_parsed, Point)
    with client.responses.stream(model=model, input="A point.", text_format=Point, max_output_tokens=MAX) as s:
        assert isinstance(s.get_final_response().output_parsed, Point)


def test_openai_parse_with_httpurl(client, model, tiny):
    """A strict client's HttpUrl (maxLength 2083 beside format: uri) compiles (formats.BOUNDED_URI). A free
    URL never ends under a random model, so tokens that begin with '"' are favoured: the string closes as
    soon as the grammar allows, after the shortest URL it has begun."""
    class Site(BaseModel):
        url: HttpUrl

    tok = tiny.tokenizer
    quote = {str(i): 100 for i in range(len(tok)) if tok.decode([i]).startswith('"')}
    r = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "A site."}],
                                      response_format=Site, max_tokens=MAX, logit_bias=quote)
    assert isinstance(r.choices[0].message.parsed, Site)


# -- langchain-openai ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chat_model(server, model):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=model, base_url=server, api_key=KEY, max_tokens=MAX, temperature=0, max_retries=0)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output(chat_model, method):
    assert isinstance(chat_model.with_structured_output(Point, method=method).invoke("A point."), Point)


def test_langchain_json_mode(chat_model):
    schema = {"title": "point", "type": "object", "properties": {"x": {"type": "integer"}}}
    # json_object bounds nothing: most random-model objects run past 256 tokens; seed 3 closes one
    llm = chat_model.model_copy(update={"max_tokens": 256, "temperature": 1.0, "seed": 3})
    out = llm.with_structured_output(schema, method="json_mode").invoke("A point as JSON.")
    assert isinstance(out, dict)  # json_object: any JSON object (the schema is only the prompt's business)


def test_langchain_bind_tools_and_stream(chat_model):
    bound = chat_model.bind_tools([Weather], tool_choice="any", parallel_tool_calls=False)
    msg = bound.invoke("Weather?")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "Weather"
    Weather.model_validate(msg.tool_calls[0]["args"])
    chunks = list(bound.stream("Weather?"))
    merged = chunks[0]
    for c in chunks[1:]:
        merged += c
    assert merged.tool_calls and "<tool" not in (merged.content or "")


# -- litellm ---------------------------------------------------------------------------------------
def test_litellm_response_format_and_tools(server, model):
    import litellm

    kw = {"model": f"openai/{model}", "api_base": server, "api_key": KEY, "max_tokens": MAX, "temperature": 0}
    r = litellm.completion(messages=[{"role": "user", "content": "A point."}], response_format=Point, **kw)
    Point.model_validate_json(r.choices[0].message.content)
    r = litellm.completion(messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER_TOOL],
                           tool_choice="required", parallel_tool_calls=False, **kw)
    call = r.choices[0].message.tool_calls[0]
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])


# -- pydantic-ai -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_pydantic_ai_tool_output(server, model, kind):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=server, api_key=KEY)
    llm = (OpenAIChatModel if kind == "chat" else OpenAIResponsesModel)(model, provider=provider)
    agent = Agent(llm, output_type=Point, model_settings={"max_tokens": MAX, "temperature": 0})
    assert isinstance(agent.run_sync("A point.").output, Point)


def test_pydantic_ai_tool_loop(server, model):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    calls = []
    agent = Agent(OpenAIChatModel(model, provider=OpenAIProvider(base_url=server, api_key=KEY)), output_type=Point,
                  model_settings={"max_tokens": MAX, "temperature": 0, "parallel_tool_calls": False})

    @agent.tool_plain
    def weather(city: str) -> str:
        """Weather in a city."""
        calls.append(city)
        return "sunny"

    assert isinstance(agent.run_sync("Weather, then a point.").output, Point)


# -- openai-agents ---------------------------------------------------------------------------------
def test_openai_agents_default_responses_model(server, model):
    """The Responses model (the SDK's default) with a tool and an ``output_type``: the forced first turn
    calls the tool, whose output goes back as a ``function_call_output`` item; the tool is then disabled
    (a random model would call it forever) and the next turn answers with the typed output."""
    from agents import Agent, ModelSettings, Runner, function_tool, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=server, api_key=KEY, max_retries=0), use_for_tracing=False)
    calls = []

    def weather(city: Literal["Paris", "Oslo"]) -> str:
        """Weather in a city."""
        calls.append(city)
        return "sunny"

    agent = Agent(name="a", instructions="Answer with a point.", model=model, output_type=Point,
                  tools=[function_tool(weather, is_enabled=lambda ctx, agent: not calls)],
                  model_settings=ModelSettings(max_tokens=MAX, temperature=0, tool_choice="required",
                                               parallel_tool_calls=False))
    result = asyncio.run(Runner.run(agent, "Weather, then a point.", max_turns=4))
    assert calls and isinstance(result.final_output, Point)
    assert [type(i).__name__ for i in result.new_items][:2] == ["ToolCallItem", "ToolCallOutputItem"]


# -- instructor ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["JSON_SCHEMA", "TOOLS"])
def test_instructor(client, model, mode):
    instructor = pytest.importorskip("instructor", reason="installed --no-deps by `make test` (its jiter pin "
                                                          "conflicts with openai's)")
    ic = instructor.from_openai(client, mode=getattr(instructor.Mode, mode))
    out = ic.chat.completions.create(model=model, response_model=Point, max_retries=0, max_tokens=MAX,
                                     messages=[{"role": "user", "content": "A point."}], temperature=0)
    assert isinstance(out, Point)


# -- outlines --------------------------------------------------------------------------------------
def test_outlines_from_openai_and_vllm(client, model):
    import outlines

    out = outlines.from_openai(client, model)("A point.", Point, max_tokens=MAX, temperature=0)
    Point.model_validate_json(out)
    out = outlines.from_vllm(client, model)("A point.", Point, max_tokens=MAX, temperature=0)
    Point.model_validate_json(out)


def test_outlines_from_sglang_regex(client, model):
    import outlines
    from outlines.types import Regex

    out = outlines.from_sglang(client, model)("Three digits.", Regex("[0-9]{3}"), max_tokens=8)
    assert len(out) == 3 and out.isdigit()


STRICT_TYPES = {  # the strict-mode Pydantic types through .parse(); unbounded strings close at once
    "set[str]": set[str], "frozenset[int]": frozenset[int], "HttpUrl": HttpUrl, "AnyUrl": AnyUrl,
    "UUID": uuid.UUID, "IPvAnyAddress": IPvAnyAddress, "EmailStr": EmailStr, "NameEmail": NameEmail,
}


@pytest.mark.parametrize("name", sorted(STRICT_TYPES))
def test_openai_parse_strict_pydantic_types(client, model, tiny, name):
    """``.parse()`` sends the model's schema in strict mode: each type compiles exactly (200) and the
    answer parses. Tokens that begin with '"' are favoured, so a free string closes as soon as its
    grammar allows (a set of such strings must still differ: the unique-array guard)."""
    m = type("M", (BaseModel,), {"__annotations__": {"v": STRICT_TYPES[name]}})
    tok = tiny.tokenizer
    quote = {str(i): 100 for i in range(len(tok)) if tok.decode([i]).startswith('"')}
    if name == "AnyUrl":  # a scheme ends at ':' ("a:" is a URL to Pydantic): favoured too
        quote[str(tok.convert_tokens_to_ids(":"))] = 100
    if name in ("EmailStr", "NameEmail"):  # an address ends at its domain's last label: '@' and '.' favoured
        quote.update({str(tok.convert_tokens_to_ids(c)): 100 for c in "@."})
    for seed in range(6):
        try:
            r = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "A value."}],
                                              response_format=m, max_tokens=MAX, logit_bias=quote, seed=seed)
        except openai.LengthFinishReasonError:  # this seed ran to max_tokens (a 200, not parsed)
            continue
        assert isinstance(r.choices[0].message.parsed, m)
        return
    pytest.fail(f"{name}: no seed finished within {MAX} tokens")
