"""A client that leaves before its answer (non-streaming chat, completions, /v1/decide): the request's work is
cancelled (rows abort, a decision's queued work leaves), the answer is 499 ``client_gone``, and nothing is logged
as an error (no CancelledError traceback). The app is called as ASGI with a client that disconnects right after
sending its body, while the engine thread is held so the request is still waiting."""

import asyncio
import json
import logging
import threading
import time

import pytest

from typedlm.decide import presets
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server


@pytest.fixture(scope="module")
def app(tiny):
    app = create_app(tiny, ServerConfig(warmup=False))
    with live_server(app, timeout=120):
        yield app


async def _call_and_leave(app, path: str, body: dict) -> list[dict]:
    raw = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent, messages = [], iter([{"type": "http.request", "body": raw, "more_body": False}])

    async def receive():
        return next(messages, {"type": "http.disconnect"})  # the client is gone once its body is in

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/decide"])
def test_a_client_that_leaves_gets_499_and_its_work_is_cancelled(app, path, caplog):
    sched = app.state.typedlm.scheduler
    model = app.state.typedlm.engine.name
    p = presets.raw("support_triage")
    body = {"/v1/completions": {"model": model, "prompt": "x", "max_tokens": 256},
            "/v1/chat/completions": {"model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 256},
            "/v1/decide": {"schema": p["schema"], "context": p["examples"][0]}}[path]
    gate = threading.Event()
    sched.call(gate.wait, 60)  # the engine thread is held: the request is still waiting when its client leaves
    try:
        with caplog.at_level(logging.INFO):
            sent = asyncio.run(_call_and_leave(app, path, body))
    finally:
        gate.set()
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 499, sent
    reply = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
    assert reply["error"]["code"] == "client_gone"
    deadline = time.monotonic() + 20
    while (sched.batch_size or sched.queue_depth or len(sched.work)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sched.batch_size == sched.queue_depth == len(sched.work) == 0  # nothing of it left in the engine
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    assert any("client disconnected" in r.getMessage() for r in caplog.records)
