"""Serving replicas on Ray Serve (typedlm.scale.serve): 2 replicas of the tiny model behind Ray Serve's proxy,
typedlm's own FastAPI app as the ingress; concurrent chat (plain and streamed) and decide requests through the
official openai client and httpx. Skipped only where ray is not installed."""

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

ray = pytest.importorskip("ray")

import httpx  # noqa: E402
from openai import OpenAI  # noqa: E402

from typedlm.decide import decide  # noqa: E402
from typedlm.scale.serve import deployment  # noqa: E402
from typedlm.server.state import ServerConfig  # noqa: E402
from typedlm.server.testing import free_port  # noqa: E402

pytestmark = pytest.mark.ray

SCHEMA = {"fields": {"spam": {"type": "boolean", "description": "Is it spam?"},
                     "tone": {"type": "enum", "description": "Tone?", "choices": ["calm", "angry"]}}}


@pytest.fixture(scope="module")
def served(tiny_dir):
    from ray import serve

    from typedlm.scale.cluster import cluster

    stack = contextlib.ExitStack()
    stack.enter_context(cluster(num_cpus=2))  # a local 2-CPU cluster, stopped after
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(deployment(str(tiny_dir), ServerConfig(max_batch=4), device="cpu", threads=1, replicas=2),
              name="typedlm", route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while sum(httpx.get(f"{url}/ready", timeout=10).status_code == 200 for _ in range(6)) < 6:
        assert time.monotonic() < deadline, "replicas did not become ready"
        time.sleep(0.2)
    yield url, serve
    serve.shutdown()
    stack.close()


def test_two_replicas_answer_concurrent_chat_and_decide(served, tiny):
    url, serve = served
    replicas = serve.status().applications["typedlm"].deployments["typedlm"].replica_states
    assert replicas.get("RUNNING") == 2
    client = OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120)
    model = client.models.list().data[0].id

    def chat(i):
        r = client.chat.completions.create(model=model, max_tokens=12, temperature=0,
                                           messages=[{"role": "user", "content": f"Hello {i}"}],
                                           extra_body={"guided_choice": ["yes", "no"]})
        return r.choices[0].message.content

    def stream(i):
        parts = client.chat.completions.create(model=model, max_tokens=8, temperature=0, stream=True,
                                               messages=[{"role": "user", "content": f"Hi {i}"}])
        return [c.choices[0].delta.content or "" for c in parts if c.choices]

    def decide_http(i):
        r = httpx.post(f"{url}/v1/decide", json={"schema": SCHEMA, "context": f"BUY NOW {i}!!!"}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(8) as pool:
        chats = list(pool.map(chat, range(4)))
        streams = list(pool.map(stream, range(4)))
        decisions = list(pool.map(decide_http, range(4)))
    assert set(chats) <= {"yes", "no"}  # the grammar held on whichever replica
    assert all(len(s) > 1 for s in streams)  # several SSE chunks came through the proxy
    for i, d in enumerate(decisions):
        assert d["value"] == decide(SCHEMA, f"BUY NOW {i}!!!", engine=tiny).value


def test_bad_request_is_a_400_through_the_proxy(served):
    url, _ = served
    r = httpx.post(f"{url}/v1/decide", json={"schema": SCHEMA, "context": "   "}, timeout=60)
    assert r.status_code == 400
