"""Every documented OpenAI / vLLM request field is honoured or rejected with a message naming it;
anything else is a 400. Never silently ignored."""

import httpx
import pytest
from openai.types.chat import completion_create_params

from typedlm.server.app import create_app
from typedlm.server.chat.protocol import ChatRequest
from typedlm.server.completions.protocol import CompletionRequest
from typedlm.server.protocol import DOCUMENTED
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server

MSG = [{"role": "user", "content": "x"}]
# a value that asks for something typedlm does not do, per documented field
ASKS = {"store": True, "metadata": {"k": "v"}, "service_tier": "flex", "modalities": ["text", "audio"],
        "audio": {"voice": "alloy", "format": "mp3"}, "prediction": {"type": "content", "content": "x"},
        "web_search_options": {}, "functions": [{"name": "f"}], "function_call": "auto", "verbosity": "low",
        "moderation": {}, "prompt_cache_options": {}, "prompt_cache_retention": "24h",
        "best_of": 2, "use_beam_search": True, "min_p": 0.1, "length_penalty": 0.5, "stop_token_ids": [5],
        "include_stop_str_in_output": True, "ignore_eos": True, "min_tokens": 3, "skip_special_tokens": False,
        "spaces_between_special_tokens": False, "truncate_prompt_tokens": 10, "prompt_logprobs": 1,
        "allowed_token_ids": [1, 2], "bad_words": ["x"], "add_generation_prompt": False,
        "continue_final_message": True, "add_special_tokens": True, "documents": [{"text": "d"}],
        "chat_template": "{{ messages }}", "mm_processor_kwargs": {}, "guided_decoding_backend": "outlines",
        "guided_whitespace_pattern": " ", "priority": 1, "logits_processors": ["x"],
        "return_tokens_as_token_ids": True, "cache_salt": "s", "kv_transfer_params": {}, "vllm_xargs": {}}


def test_table_covers_every_documented_field():
    assert set(ASKS) == set(DOCUMENTED)
    openai_fields = set(completion_create_params.CompletionCreateParamsBase.__annotations__)
    assert openai_fields - set(ChatRequest.model_fields) - set(DOCUMENTED) == set()


@pytest.fixture(scope="module")
def url(tiny):
    with live_server(create_app(tiny, ServerConfig())) as u:
        yield u


@pytest.mark.parametrize("field", sorted(DOCUMENTED))
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_documented_field_asking_for_something_is_400_naming_it(url, tiny, field, route):
    body = {"model": tiny.name, "max_tokens": 1, field: ASKS[field]}
    body.update({"messages": MSG} if route.endswith("chat/completions") else {"prompt": "x"})
    r = httpx.post(url + route, json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith(f"{field}: ")


def test_no_op_values_are_accepted_all_together(url, tiny):
    body = {"model": tiny.name, "messages": MSG, "max_tokens": 1, "prompt_cache_key": "k",
            "safety_identifier": "u", "request_id": "r",
            **{f: noop[-1] for f, (noop, _) in DOCUMENTED.items()}}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_unknown_field_is_400_naming_it(url, tiny, route):
    body = {"model": tiny.name, "max_tokens": 1, "frobnicate": 1}
    body.update({"messages": MSG} if route.endswith("chat/completions") else {"prompt": "x"})
    r = httpx.post(url + route, json=body, timeout=60)
    assert r.status_code == 400 and "frobnicate" in r.json()["error"]["message"]


def test_message_fields_are_checked_too(url, tiny):
    bad = {"model": tiny.name, "max_tokens": 1, "messages": [{"role": "user", "content": "x", "colour": "red"}]}
    r = httpx.post(url + "/v1/chat/completions", json=bad, timeout=60)
    assert r.status_code == 400 and "colour" in r.json()["error"]["message"]


def test_completion_request_declares_the_shared_fields():
    assert {"logit_bias", "jump_forward"} <= set(CompletionRequest.model_fields)
